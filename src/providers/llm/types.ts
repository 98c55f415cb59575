/** The longest a streamed answer may take in all by default (LLM_STREAM_MAX_MS): 10 minutes, far beyond any answer of the default budgets. */
export const DEFAULT_STREAM_MAX_MS = 600_000;

/** Settings of the chat model provider, read from LLM_* environment variables by src/config.ts. */
export interface LlmConfig {
  provider: 'local' | 'openai-compatible';
  baseUrl?: string;
  apiKey?: string;
  /** Default model name; institutions may override the summary model. */
  model?: string;
  timeoutMs: number;
  /** The longest a streamed answer may take in all, from the request to its last chunk (LLM_STREAM_MAX_MS; default 600,000). */
  streamMaxMs?: number;
  maxRetries: number;
  /**
   * Name of the completion budget field: OpenAI's reasoning and newest models (o1, o3, o4, gpt-5, ...)
   * refuse `max_tokens` and want `max_completion_tokens`; most other servers know only `max_tokens`.
   * 'auto' picks by model name.
   */
  maxTokensField?: 'auto' | 'max_tokens' | 'max_completion_tokens';
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** Tool calls the assistant asked for (role assistant). */
  toolCalls?: ToolCall[];
  /** The call a tool message answers (role tool). */
  toolCallId?: string;
}

/** A function the model may call (OpenAI function calling). */
export interface ToolDefinition {
  name: string;
  description: string;
  /** JSON schema of the arguments. */
  parameters: Record<string, unknown>;
}

export interface ToolCall {
  id: string;
  name: string;
  /** The arguments as the model sent them (a JSON text). */
  arguments: string;
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
  /**
   * Retrieved passages for purpose 'answer', as a structured copy of what the messages already carry
   * (the prompt numbers them in its system message): the local answerer reads them from here. They are
   * not more input: a call's input tokens are its messages'.
   */
  context?: ContextPassage[];
  /** Functions the model may call; a result with toolCalls asks the caller to run them and call again. */
  tools?: ToolDefinition[];
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
  /** Calls the model asked for instead of (or before) answering. */
  toolCalls?: ToolCall[];
  /** The answer stopped at the request's maxTokens (finish_reason "length"): it is cut short. */
  truncated?: boolean;
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
