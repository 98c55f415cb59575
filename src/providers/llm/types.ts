/** Settings of the chat model provider, read from LLM_* environment variables by src/config.ts. */
export interface LlmConfig {
  provider: 'local' | 'openai-compatible';
  baseUrl?: string;
  apiKey?: string;
  /** Default model name; institutions may override the summary model. */
  model?: string;
  timeoutMs: number;
  maxRetries: number;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** A passage of retrieved context the answer may draw on (used by the local extractive answerer). */
export interface ContextPassage {
  text: string;
  source?: string;
}

export interface ChatRequest {
  /** What the call is for. The local provider answers each purpose deterministically. */
  purpose: 'sanitize' | 'answer';
  messages: ChatMessage[];
  /** Overrides the provider's default model (e.g. an institution's summary model). */
  model?: string;
  maxTokens?: number;
  temperature?: number;
  /** Retrieved passages for purpose 'answer'. */
  context?: ContextPassage[];
  signal?: AbortSignal;
}

export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  totalTokens: number;
}

export interface ChatResult {
  text: string;
  model: string;
  usage: TokenUsage;
}

export type ChatStreamEvent = { type: 'delta'; text: string } | { type: 'done'; result: ChatResult };

export interface ChatModel {
  readonly provider: string;
  readonly defaultModel: string;
  complete(request: ChatRequest): Promise<ChatResult>;
  stream(request: ChatRequest): AsyncIterable<ChatStreamEvent>;
}

/** Raised when the provider still fails after its retries; the HTTP layer maps it to 502 UPSTREAM_FAILED. */
export class UpstreamError extends Error {
  constructor(message: string, readonly status?: number) {
    super(message);
    this.name = 'UpstreamError';
  }
}
