import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import { boundedFetch, byteSize, type BoundedFetch } from '../../shared/bounded-body.js';
import { storableText } from '../../shared/storable-text.js';
import { countInputTokens, countTextTokens, loadEncoding } from './tokens.js';
import { DEFAULT_STREAM_MAX_MS, UpstreamError, type ChatMessage, type ChatModel, type ChatRequest, type ChatResult, type ChatStreamEvent, type LlmConfig, type TokenUsage, type ToolCall } from './types.js';

/** The least a model call's answer may be: room for any answer of the default budgets, many times over. */
const MIN_ANSWER_BYTES = 16 * 1024 * 1024;
/** Bytes a completion's body may spend a token of its budget: the text of a token, as JSON escapes it (\uXXXX for all but ASCII, as some servers send it), about 12 at worst. */
const COMPLETION_BYTES_PER_TOKEN = 128;
/** Bytes a stream may spend a token of its budget: servers send a chunk a token, each a JSON object of about 300 bytes around its text. */
const STREAM_BYTES_PER_TOKEN = 1024;

/** The most bytes a completion's body may have: 16 MiB, or 128 bytes a token of its budget (`maxTokens`) when that is more. */
export function completionByteLimit(maxTokens: number | undefined): number {
  return Math.max(MIN_ANSWER_BYTES, (maxTokens ?? 0) * COMPLETION_BYTES_PER_TOKEN);
}

/** The most bytes a stream may have in all (its chunks, their JSON and SSE framing): 16 MiB, or 1 KiB a token of its budget when that is more. */
export function streamByteLimit(maxTokens: number | undefined): number {
  return Math.max(MIN_ANSWER_BYTES, (maxTokens ?? 0) * STREAM_BYTES_PER_TOKEN);
}

/** Models that refuse `max_tokens` and want `max_completion_tokens` (OpenAI reasoning and newest families). */
const WANTS_MAX_COMPLETION_TOKENS = /^(?:openai\/)?(?:o\d|gpt-5|gpt-4\.1)/iu;

/** The completion budget field for a model, by configuration or (auto) by its name. */
export function maxTokensFieldFor(model: string, configured: LlmConfig['maxTokensField'] = 'auto'): 'max_tokens' | 'max_completion_tokens' {
  if (configured && configured !== 'auto') return configured;
  return WANTS_MAX_COMPLETION_TOKENS.test(model) ? 'max_completion_tokens' : 'max_tokens';
}

function wireMessage(m: ChatMessage): OpenAI.ChatCompletionMessageParam {
  if (m.role === 'tool') return { role: 'tool', content: m.content, tool_call_id: m.toolCallId ?? '' };
  if (m.role === 'assistant' && m.toolCalls?.length) {
    return {
      role: 'assistant',
      content: m.content || null,
      tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
    };
  }
  return { role: m.role, content: m.content } as OpenAI.ChatCompletionMessageParam;
}

/**
 * Chat model behind any server speaking the OpenAI chat-completions wire format (OpenAI, vLLM,
 * llama.cpp, Ollama, LM Studio, LiteLLM, ...), through the official `openai` SDK.
 *
 * Retries: the SDK retries 408/409/429/5xx and connection failures `config.maxRetries` times with
 * exponential backoff (honouring Retry-After / retry-after-ms). What still fails is thrown as
 * {@link UpstreamError}. An aborted `request.signal` rejects with the signal's reason instead.
 *
 * Timeouts: `config.timeoutMs` bounds each attempt until the response headers arrive (the SDK's
 * timeout); then a completion's body, and the body of an error answer (which the SDK reads for its
 * message), must arrive within `timeoutMs`, and a stream fails when no chunk arrives for `timeoutMs`, or
 * when it has not finished `config.streamMaxMs` after the request (chunks each just inside the stall timeout
 * would otherwise hold the call for as long as the size bound lets them).
 *
 * Sizes: what the provider sends is read through a bound (see {@link completionByteLimit} and
 * {@link streamByteLimit}: 16 MiB unless the call's completion budget needs more), so that an endpoint
 * answering with gigabytes, or a stream that never ends, cannot take the process's memory: past the bound
 * the connection is closed and the call fails with an {@link UpstreamError} naming it.
 *
 * An answer must be complete: a completion without a choice, or a stream that ends (even cleanly)
 * before a choice's finish_reason, is an {@link UpstreamError}, not a short answer.
 *
 * What the provider sends is text we store (the answer, the model name, tool calls): it is made storable
 * here (see {@link providerText}), and a message content given as an array of parts (as some servers send
 * it) is the text of its text parts; any other content that is not text is an {@link UpstreamError}.
 */
export class OpenAiCompatibleChatModel implements ChatModel {
  readonly provider = 'openai-compatible';
  readonly defaultModel: string;
  private readonly client: OpenAI;
  private readonly timeoutMs: number;
  private readonly streamMaxMs: number;
  private readonly maxTokensField: LlmConfig['maxTokensField'];

  constructor(config: LlmConfig) {
    if (!config.baseUrl) throw new Error('The openai-compatible chat model needs a base URL (LLM_BASE_URL)');
    if (!config.model) throw new Error('The openai-compatible chat model needs a model name (LLM_MODEL)');
    this.defaultModel = config.model;
    this.timeoutMs = config.timeoutMs;
    this.streamMaxMs = config.streamMaxMs ?? DEFAULT_STREAM_MAX_MS;
    this.maxTokensField = config.maxTokensField ?? 'auto';
    this.client = new OpenAI({
      baseURL: config.baseUrl,
      apiKey: config.apiKey ?? 'not-needed',
      timeout: config.timeoutMs,
      maxRetries: config.maxRetries,
      // the SDK would write what it cannot parse (answer text) to the console, past the app's logger; its failures are thrown
      logLevel: 'off',
    });
  }

  async complete(request: ChatRequest): Promise<ChatResult> {
    throwIfAborted(request.signal);
    await loadEncoding(); // usage is counted when the provider does not report it
    const model = request.model ?? this.defaultModel;
    // The SDK's timeout ends once the headers are in; the body gets timeoutMs of its own (bounded(), as its size).
    const bounds = this.bounded(completionByteLimit(request.maxTokens), 'answer', false);
    try {
      const response = await this.client
        .withOptions({ fetch: bounds.fetch })
        .chat.completions.create({ ...this.params(request, model), stream: false }, request.signal ? { signal: request.signal } : undefined)
        .asResponse();
      const res = (await response.json()) as OpenAI.ChatCompletion;
      const choice = Array.isArray(res?.choices) ? res.choices[0] : undefined;
      if (!choice) throw new UpstreamError('The model provider answered without a completion (no choice)');
      const message = choice.message;
      const text = providerText(contentText(message?.content));
      const toolCalls: ToolCall[] = (message?.tool_calls ?? [])
        .filter((c) => c.type === 'function')
        .map((c) => {
          const fn = (c as { function?: { name?: unknown; arguments?: unknown } }).function;
          return providerToolCall({ id: c.id, name: fn?.name, arguments: fn?.arguments });
        });
      return {
        text,
        model: providerName(res.model) || model,
        usage: usageOf(res.usage, request, text),
        ...(toolCalls.length ? { toolCalls } : {}),
        ...(choice.finish_reason === 'length' ? { truncated: true } : {}),
      };
    } catch (err) {
      throw this.mapError(err, request.signal, bounds);
    }
  }

  async *stream(request: ChatRequest): AsyncGenerator<ChatStreamEvent> {
    throwIfAborted(request.signal);
    await loadEncoding();
    const model = request.model ?? this.defaultModel;
    // Our own controller, so that a stalled stream can be cut off; it follows the caller's signal.
    const controller = new AbortController();
    const follow = () => controller.abort(request.signal?.reason);
    request.signal?.addEventListener('abort', follow, { once: true });
    let idle: NodeJS.Timeout | undefined;
    let stalled = false;
    let overran = false;
    const deadline = setTimeout(() => {
      overran = true;
      controller.abort();
    }, this.streamMaxMs).unref();
    const cutOff = () =>
      overran
        ? new UpstreamError(`The model provider's stream did not finish within ${this.streamMaxMs} ms in all (LLM_STREAM_MAX_MS)`)
        : new UpstreamError(`The model provider's stream stalled for more than ${this.timeoutMs} ms`);
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        stalled = true;
        controller.abort();
      }, this.timeoutMs);
    };
    let text = '';
    /** A high surrogate that ended a delta: its low half may start the next one. */
    let pending = '';
    let reportedModel = '';
    let usage: OpenAI.CompletionUsage | undefined;
    // Tool calls arrive in pieces keyed by index: the id and name first, the arguments in fragments.
    const calls = new Map<number, ToolCall>();
    let finished = false;
    // a stream's success body is bounded in time by the stall timeout above, in size in all by bounded()
    const bounds = this.bounded(streamByteLimit(request.maxTokens), 'stream', true);
    try {
      const stream = await this.client.withOptions({ fetch: bounds.fetch }).chat.completions.create(
        { ...this.params(request, model), stream: true, stream_options: { include_usage: true } },
        { signal: controller.signal },
      );
      arm();
      for await (const chunk of stream) {
        arm();
        if (typeof chunk.model === 'string' && chunk.model) reportedModel = chunk.model;
        if (chunk.usage) usage = chunk.usage;
        if (chunk.choices?.[0]?.finish_reason) finished = true;
        for (const part of chunk.choices[0]?.delta?.tool_calls ?? []) {
          const call = calls.get(part.index) ?? { id: '', name: '', arguments: '' };
          if (typeof part.id === 'string' && part.id) call.id = part.id;
          if (typeof part.function?.name === 'string') call.name += part.function.name;
          if (part.function?.arguments) call.arguments += argumentsText(part.function.arguments);
          calls.set(part.index, call);
        }
        // a surrogate pair cut between two deltas is joined again, not made two U+FFFD
        let delta = pending + contentText(chunk.choices[0]?.delta?.content);
        pending = '';
        if (/[\ud800-\udbff]$/u.test(delta)) {
          pending = delta.slice(-1);
          delta = delta.slice(0, -1);
        }
        delta = providerText(delta);
        if (delta) {
          text += delta;
          yield { type: 'delta', text: delta };
        }
      }
      // The SDK ends the iteration quietly when its signal aborts: find out why.
      if (stalled || overran) throw cutOff();
      throwIfAborted(request.signal);
      if (!finished) throw new UpstreamError("The model provider's stream ended before the answer was finished (no finish_reason)");
      if (pending) {
        // a high surrogate that nothing completed
        const last = providerText(pending);
        text += last;
        yield { type: 'delta', text: last };
      }
    } catch (err) {
      if ((stalled || overran) && !(err instanceof UpstreamError)) throw cutOff();
      throw this.mapError(err, request.signal, bounds);
    } finally {
      clearTimeout(idle);
      clearTimeout(deadline);
      controller.abort(); // releases the connection when the consumer stops early
      request.signal?.removeEventListener('abort', follow);
    }
    const toolCalls = [...calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => providerToolCall(c)).filter((c) => c.name);
    yield { type: 'done', result: { text, model: providerName(reportedModel) || model, usage: usageOf(usage, request, text), ...(toolCalls.length ? { toolCalls } : {}) } };
  }

  private params(request: ChatRequest, model: string) {
    return {
      model,
      messages: request.messages.map(wireMessage),
      ...(request.maxTokens !== undefined ? { [maxTokensFieldFor(model, this.maxTokensField)]: request.maxTokens } : {}),
      ...(request.tools?.length
        ? { tools: request.tools.map((t) => ({ type: 'function' as const, function: { name: t.name, description: t.description, parameters: t.parameters } })) }
        : {}),
      ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    };
  }

  /**
   * A fetch for one call whose response bodies are bounded: at most `maxBytes`; within timeoutMs of the headers,
   * except the success answer of a stream (`streamed`), which its stall timeout bounds.
   */
  private bounded(maxBytes: number, what: 'answer' | 'stream', streamed: boolean): BoundedFetch {
    return boundedFetch((response) => ({
      maxBytes,
      ...(streamed && response.ok ? {} : { deadlineMs: this.timeoutMs }),
      tooLarge: () =>
        new UpstreamError(
          `The model provider's ${response.ok ? what : `error answer (HTTP ${response.status})`} was larger than ${byteSize(maxBytes)}, the most read of a call with this completion budget; the connection was closed`,
          response.ok ? undefined : response.status,
        ),
      tooSlow: () => new UpstreamError(`The model provider did not send its answer within ${this.timeoutMs} ms of starting it`, response.ok ? undefined : response.status),
    }));
  }

  /** Turns whatever the SDK threw into an UpstreamError (or the caller's abort reason); a bound a body broke is the failure, however the SDK reported it. */
  private mapError(err: unknown, signal: AbortSignal | undefined, bounds?: BoundedFetch): unknown {
    if (err instanceof UpstreamError) return err;
    if (signal?.aborted) return signal.reason ?? err;
    const breach = bounds?.breach();
    if (breach) return breach;
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

/**
 * Text from the provider as the database can store it: Postgres refuses a NUL in text (and jsonb refuses
 * a lone surrogate), so a provider's defect would make the answer's save fail after the model was paid
 * for. storableText drops the NUL (and the other C0 controls but tab and newline) and makes a lone
 * surrogate U+FFFD; an answer is not shortened.
 */
function providerText(text: string): string {
  return storableText(text, Number.POSITIVE_INFINITY);
}

/** A name the provider reports (model, tool): storable, at most storableText's default length; '' when it is not text. */
function providerName(name: unknown): string {
  return typeof name === 'string' ? storableText(name) : '';
}

/**
 * The text of a message content: a string as it is; an array of content parts (`[{type: 'text', text}]`,
 * as several OpenAI-compatible servers send it) the text of its text parts, joined; none is ''. Anything
 * else is not an answer the provider may give.
 */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (Array.isArray(content)) {
    return content
      .map((part: unknown) => {
        const p = part as { type?: unknown; text?: unknown } | null;
        return p && typeof p === 'object' && p.type === 'text' && typeof p.text === 'string' ? p.text : '';
      })
      .join('');
  }
  throw new UpstreamError(`The model provider answered with a message content that is not text (${typeof content})`);
}

/** Tool-call arguments as a JSON text: a server that sends them as an object gets them serialized. */
function argumentsText(args: unknown): string {
  if (typeof args === 'string') return args;
  return args === null || args === undefined ? '' : JSON.stringify(args);
}

/**
 * A tool call made storable: its id and name as names, its arguments as text; arguments that are JSON
 * have their strings (keys too) made storable after parsing, since a NUL or a lone surrogate can be
 * written there as an escape (`\u0000`) that only the parse turns into the character.
 */
function providerToolCall(call: { id?: unknown; name?: unknown; arguments?: unknown }): ToolCall {
  const raw = providerText(argumentsText(call.arguments));
  let args = raw;
  try {
    const parsed: unknown = JSON.parse(raw);
    let changed = false;
    const clean = (value: unknown): unknown => {
      if (typeof value === 'string') {
        const text = providerText(value);
        if (text !== value) changed = true;
        return text;
      }
      if (value === null || typeof value !== 'object') return value;
      if (Array.isArray(value)) return value.map(clean);
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [clean(k) as string, clean(v)]));
    };
    const cleaned = clean(parsed);
    if (changed) args = JSON.stringify(cleaned);
  } catch {
    // not JSON (the tool answers the model so; the text itself is storable), or nested too deep to walk
  }
  return { id: providerName(call.id), name: providerName(call.name), arguments: args };
}

/** The provider's own error message (from `{error: {message}}`), without the SDK's status prefix. */
function providerMessage(err: APIError): string {
  const body = err.error as { message?: unknown } | undefined;
  const message = typeof body?.message === 'string' ? body.message : err.message;
  return message.replace(/^\d{3}\s+/u, '').slice(0, 300);
}

/** Token counts above this from a provider are not believed (they would overflow the saved records' integers). */
const MAX_REPORTED_TOKENS = 100_000_000;

/** A count the provider reported, when it is a plausible one (a whole number in 0..MAX_REPORTED_TOKENS). */
function reported(n: unknown): number | undefined {
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= MAX_REPORTED_TOKENS ? n : undefined;
}

/** The provider's usage; a count missing or implausible is counted here instead. */
function usageOf(usage: OpenAI.CompletionUsage | null | undefined, request: ChatRequest, text: string): TokenUsage {
  const inputTokens = reported(usage?.prompt_tokens) ?? countInputTokens(request.messages);
  const outputTokens = reported(usage?.completion_tokens) ?? countTextTokens(text);
  const total = reported(usage?.total_tokens);
  return { inputTokens, outputTokens, totalTokens: total !== undefined && total >= inputTokens + outputTokens ? total : inputTokens + outputTokens };
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw signal.reason ?? new DOMException('The operation was aborted', 'AbortError');
}
