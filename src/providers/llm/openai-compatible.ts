import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import { countInputTokens, countTextTokens } from './tokens.js';
import { UpstreamError, type ChatModel, type ChatRequest, type ChatResult, type ChatStreamEvent, type LlmConfig, type TokenUsage } from './types.js';

/**
 * Chat model behind any server speaking the OpenAI chat-completions wire format (OpenAI, vLLM,
 * llama.cpp, Ollama, LM Studio, LiteLLM, ...), through the official `openai` SDK.
 *
 * Retries: the SDK retries 408/409/429/5xx and connection failures `config.maxRetries` times with
 * exponential backoff (honouring Retry-After / retry-after-ms). What still fails is thrown as
 * {@link UpstreamError}. An aborted `request.signal` rejects with the signal's reason instead.
 *
 * Timeouts: `config.timeoutMs` bounds each attempt until the response headers arrive (the SDK's
 * timeout); a stream additionally fails when no chunk arrives for `timeoutMs`.
 */
export class OpenAiCompatibleChatModel implements ChatModel {
  readonly provider = 'openai-compatible';
  readonly defaultModel: string;
  private readonly client: OpenAI;
  private readonly timeoutMs: number;

  constructor(config: LlmConfig) {
    if (!config.baseUrl) throw new Error('The openai-compatible chat model needs a base URL (LLM_BASE_URL)');
    if (!config.model) throw new Error('The openai-compatible chat model needs a model name (LLM_MODEL)');
    this.defaultModel = config.model;
    this.timeoutMs = config.timeoutMs;
    this.client = new OpenAI({
      baseURL: config.baseUrl,
      apiKey: config.apiKey ?? 'not-needed',
      timeout: config.timeoutMs,
      maxRetries: config.maxRetries,
    });
  }

  async complete(request: ChatRequest): Promise<ChatResult> {
    throwIfAborted(request.signal);
    const model = request.model ?? this.defaultModel;
    try {
      const res = await this.client.chat.completions.create({ ...this.params(request, model), stream: false }, { signal: request.signal });
      const text = res.choices[0]?.message?.content ?? '';
      return { text, model: res.model || model, usage: usageOf(res.usage, request, text) };
    } catch (err) {
      throw this.mapError(err, request.signal);
    }
  }

  async *stream(request: ChatRequest): AsyncGenerator<ChatStreamEvent> {
    throwIfAborted(request.signal);
    const model = request.model ?? this.defaultModel;
    // Our own controller, so that a stalled stream can be cut off; it follows the caller's signal.
    const controller = new AbortController();
    const follow = () => controller.abort(request.signal?.reason);
    request.signal?.addEventListener('abort', follow, { once: true });
    let idle: NodeJS.Timeout | undefined;
    let stalled = false;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        stalled = true;
        controller.abort();
      }, this.timeoutMs);
    };
    let text = '';
    let reportedModel = '';
    let usage: OpenAI.CompletionUsage | undefined;
    try {
      const stream = await this.client.chat.completions.create(
        { ...this.params(request, model), stream: true, stream_options: { include_usage: true } },
        { signal: controller.signal },
      );
      arm();
      for await (const chunk of stream) {
        arm();
        if (chunk.model) reportedModel = chunk.model;
        if (chunk.usage) usage = chunk.usage;
        const delta = chunk.choices[0]?.delta?.content;
        if (delta) {
          text += delta;
          yield { type: 'delta', text: delta };
        }
      }
      // The SDK ends the iteration quietly when its signal aborts: find out why.
      if (stalled) throw new UpstreamError(`The model provider's stream stalled for more than ${this.timeoutMs} ms`);
      throwIfAborted(request.signal);
    } catch (err) {
      if (stalled && !(err instanceof UpstreamError)) throw new UpstreamError(`The model provider's stream stalled for more than ${this.timeoutMs} ms`);
      throw this.mapError(err, request.signal);
    } finally {
      clearTimeout(idle);
      controller.abort(); // releases the connection when the consumer stops early
      request.signal?.removeEventListener('abort', follow);
    }
    yield { type: 'done', result: { text, model: reportedModel || model, usage: usageOf(usage, request, text) } };
  }

  private params(request: ChatRequest, model: string) {
    return {
      model,
      messages: request.messages.map((m) => ({ role: m.role, content: m.content })),
      ...(request.maxTokens !== undefined ? { max_tokens: request.maxTokens } : {}),
      ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    };
  }

  /** Turns whatever the SDK threw into an UpstreamError (or the caller's abort reason). */
  private mapError(err: unknown, signal: AbortSignal | undefined): unknown {
    if (err instanceof UpstreamError) return err;
    if (signal?.aborted) return signal.reason ?? err;
    if (err instanceof APIUserAbortError) return new UpstreamError('The model provider call was aborted');
    if (err instanceof APIConnectionTimeoutError) return new UpstreamError(`The model provider did not answer within ${this.timeoutMs} ms`);
    if (err instanceof APIConnectionError) {
      const cause = err.cause instanceof Error ? err.cause.message : err.message;
      return new UpstreamError(`Could not connect to the model provider (${cause})`);
    }
    if (err instanceof APIError) {
      const detail = providerMessage(err);
      return err.status === undefined
        ? new UpstreamError(`The model provider reported an error${detail ? `: ${detail}` : ''}`)
        : new UpstreamError(`The model provider answered HTTP ${err.status}${detail ? `: ${detail}` : ''}`, err.status);
    }
    return new UpstreamError(`The model provider call failed: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** The provider's own error message (from `{error: {message}}`), without the SDK's status prefix. */
function providerMessage(err: APIError): string {
  const body = err.error as { message?: unknown } | undefined;
  const message = typeof body?.message === 'string' ? body.message : err.message;
  return message.replace(/^\d{3}\s+/u, '').slice(0, 300);
}

function usageOf(usage: OpenAI.CompletionUsage | null | undefined, request: ChatRequest, text: string): TokenUsage {
  const inputTokens = usage?.prompt_tokens ?? countInputTokens(request.messages);
  const outputTokens = usage?.completion_tokens ?? countTextTokens(text);
  return { inputTokens, outputTokens, totalTokens: usage?.total_tokens ?? inputTokens + outputTokens };
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw signal.reason ?? new DOMException('The operation was aborted', 'AbortError');
}
