/**
 * A real local HTTP server that speaks the OpenAI wire format, for tests of anything that calls a
 * model provider (chat completions, streaming, embeddings) through the `openai` SDK or plain fetch.
 *
 *   const stub = await startOpenAiStub();
 *   // point the code under test at stub.baseUrl (http://127.0.0.1:PORT/v1), then:
 *   stub.setChatHandler(({ lastUserMessage }) => ({ content: `echo: ${lastUserMessage}`, usage: { prompt_tokens: 7, completion_tokens: 3 } }));
 *   stub.failNext(2, 503);       // the next two calls answer 503 with an OpenAI-style error body
 *   stub.delayMs(500);           // every response waits 500 ms before its headers (timeouts)
 *   stub.requests                // every request received: method, path, headers, parsed body
 *   await stub.close();
 *
 * Endpoints (under /v1):
 * - POST /chat/completions: a `chat.completion` object with usage; with `stream: true`, SSE lines
 *   `data: {chat.completion.chunk}` (a role chunk, content chunks of a few words or the reply's `deltas`, a finish chunk),
 *   a final usage chunk (`choices: []`) when `stream_options.include_usage`, then `data: [DONE]`.
 *   Default reply: the last user message with its whitespace collapsed; usage counts ~4 characters
 *   per token (prompt: all message contents; completion: the reply).
 * - POST /embeddings: one vector per input, `dimensions` long (default 8), L2-normalised and
 *   deterministic: hashed words, so texts sharing words point in similar directions.
 *   Honours `encoding_format: 'base64'` (little-endian float32, the SDK's default). usage.prompt_tokens
 *   counts ~4 characters per token.
 * - GET /models: the model list.
 *
 * Failures: `failNext(n, status)` applies to the next n requests of any endpoint and answers
 * `{error: {message, type, param, code}}`; `failNextWithBody(status, body)` answers the next request so, its
 * body followed by spaces without end (as fast as they are taken, or a few a second).
 * Oversized answers (bounds on what a client reads): `padNextAnswer(bytes)` follows the next JSON answer with
 * that many spaces (still the same valid JSON), `floodNextStream(bytes)` keeps the next stream sending chunks;
 * `bodies` says how much of each was sent and whether the client hung up first. So that SDK retries do not slow tests down, error answers
 * carry `retry-after-ms: 0` unless `startOpenAiStub({retryAfterMs})` says otherwise (null: no header,
 * the SDK's own backoff applies).
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  method: string;
  /** Path with query, e.g. "/v1/chat/completions". */
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body (undefined when there is none or it is not JSON). */
  body: any;
}

export interface StubChatMessage {
  role: string;
  content: unknown;
}

export interface ChatHandlerInput {
  body: any;
  model: string;
  messages: StubChatMessage[];
  /** Text of the last message with role "user" ('' if none). */
  lastUserMessage: string;
  stream: boolean;
}

export interface ChatReply {
  /**
   * The message content: text, or any other JSON value sent as it is (an array of content parts
   * `[{type: 'text', text}]`, as some OpenAI-compatible servers send it, or a broken server's value).
   */
  content: string | unknown[] | Record<string, unknown> | number | boolean | null;
  /** Streamed answers: the content of each content delta, as sent (default: the content in groups of a few words; not text: one delta). */
  deltas?: unknown[];
  /** Model name to report; defaults to the requested one. */
  model?: string;
  /** Token usage to report; missing fields are estimated. `null` leaves usage out of the answer. */
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
  finishReason?: 'stop' | 'length' | 'content_filter' | 'tool_calls';
  /** Function calls to answer with (finish_reason tool_calls); streamed as delta.tool_calls pieces. */
  toolCalls?: Array<{ name: string; arguments: string }>;
  /** A non-streamed answer with `choices: []` (a broken provider). */
  noChoices?: boolean;
}

export type ChatHandler = (input: ChatHandlerInput) => ChatReply | string | Promise<ChatReply | string>;

export interface EmbeddingsHandlerInput {
  body: any;
  model: string;
  texts: string[];
  dimensions: number;
}

export type EmbeddingsHandler = (input: EmbeddingsHandlerInput) => number[][] | Promise<number[][]>;

export interface OpenAiStubOptions {
  chatHandler?: ChatHandler;
  embeddingsHandler?: EmbeddingsHandler;
  /** When set, requests must carry `Authorization: Bearer <apiKey>`, else 401. */
  apiKey?: string;
  /** Models listed by GET /v1/models. */
  models?: string[];
  /** `retry-after-ms` header of error answers (default 0); null sends none. */
  retryAfterMs?: number | null;
}

export interface OpenAiStub {
  /** http://127.0.0.1:PORT/v1 */
  baseUrl: string;
  /** Every request received, in order (also the failed and delayed ones). */
  requests: RecordedRequest[];
  /** Replaces the chat handler; null restores the default (echo of the last user message). */
  setChatHandler(handler: ChatHandler | null): void;
  /** Replaces the embeddings handler; null restores the default (hashed words). */
  setEmbeddingsHandler(handler: EmbeddingsHandler | null): void;
  /** The next `n` requests answer `status` with an OpenAI-style error body. */
  failNext(n: number, status?: number, message?: string): void;
  /** Every response from now on waits `ms` before answering (0 turns it off). */
  delayMs(ms: number): void;
  /** Pause between the chunks of streamed answers (0 turns it off), e.g. to test stalled streams. */
  streamChunkDelayMs(ms: number): void;
  /** The next streamed chat answer drops its connection after `chunks` content chunks (a mid-stream failure). */
  dropNextStreamAfter(chunks: number): void;
  /** The next streamed chat answer ends cleanly after `chunks` content chunks: no finish_reason, no `[DONE]`. */
  endNextStreamAfter(chunks: number): void;
  /** The next streamed chat answer sends a chunk that is not JSON after `chunks` content chunks. */
  malformNextStreamAfter(chunks: number): void;
  /** The next successful JSON answer (a chat completion not streamed, embeddings, moderation) sends its headers and a first part of its body, then waits `ms` before the rest. */
  stallNextBody(ms: number): void;
  /**
   * The next successful JSON answer (a chat completion not streamed, embeddings, moderation) is followed by `bytes`
   * spaces: the same valid JSON, that much longer. Sent without content-length, honouring backpressure.
   */
  padNextAnswer(bytes: number): void;
  /**
   * The next streamed chat answer, after its role chunk, keeps sending content chunks (each about 64 KiB: a word of
   * content and spaces inside its JSON) until the client hangs up, or until it has sent `bytes`: then it finishes as usual.
   */
  floodNextStream(bytes: number): void;
  /**
   * The next request answers `status` with an OpenAI-style error body followed by spaces: `{floodBytes}` that many
   * as fast as the client takes them, `{trickleMs}` one every 20 ms for that long; then the body ends.
   */
  failNextWithBody(status: number, body: { floodBytes: number } | { trickleMs: number }): void;
  /** The padded, flooded and endless bodies sent, once each ended: the bytes written and whether the client hung up before the end. */
  bodies: Array<{ path: string; sent: number; hungUp: boolean }>;
  /** Answers POST /v1/moderations: flagged when the handler returns true for an input. */
  setModerationHandler(handler: ((input: string) => boolean) | null): void;
  /** Requests whose path starts with `prefix` (e.g. "/v1/chat/completions"). */
  requestsTo(prefix: string): RecordedRequest[];
  close(): Promise<void>;
}

/** ~4 characters per token, at least 1 for non-empty text. */
export function estimateTokens(text: string): number {
  return text.length === 0 ? 0 : Math.ceil(text.length / 4);
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => (p && typeof p === 'object' && typeof p.text === 'string' ? p.text : '')).join('');
  return '';
}

export const defaultChatHandler: ChatHandler = ({ lastUserMessage }) => ({ content: lastUserMessage.replace(/\s+/gu, ' ').trim() });

/** Deterministic L2-normalised vector: each word adds ±1 at a hashed position. */
export function hashedEmbedding(text: string, dimensions: number): number[] {
  const v = new Array<number>(dimensions).fill(0);
  const words = text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
  for (const w of words) {
    const h = createHash('sha256').update(w).digest();
    v[h.readUInt32BE(0) % dimensions]! += h[4]! & 1 ? 1 : -1;
  }
  const norm = Math.hypot(...v);
  return norm === 0 ? v.map((_, i) => (i === 0 ? 1 : 0)) : v.map((x) => x / norm);
}

export const defaultEmbeddingsHandler: EmbeddingsHandler = ({ texts, dimensions }) => texts.map((t) => hashedEmbedding(t, dimensions));

const ERROR_TYPES: Record<number, string> = { 400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error', 429: 'rate_limit_error' };

/** Whether the answer can no longer be written (client went away, stub closed, or already answered). */
function gone(res: ServerResponse): boolean {
  return res.destroyed || res.writableEnded || res.socket === null || res.socket.destroyed;
}

/** Resolves when `res` can take more (drain), or is gone (close). */
export function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}

const SPACES = ' '.repeat(64 * 1024);

/** Writes pieces of `next()` until `total` bytes are written or the client is gone, honouring backpressure; the bytes written. */
async function pour(res: ServerResponse, total: number, next: (left: number) => string): Promise<number> {
  let sent = 0;
  while (sent < total && !gone(res)) {
    const piece = next(total - sent);
    sent += Buffer.byteLength(piece);
    if (!res.write(piece)) await drained(res);
  }
  return sent;
}

class StubHttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

export async function startOpenAiStub(options: OpenAiStubOptions = {}): Promise<OpenAiStub> {
  const requests: RecordedRequest[] = [];
  let chatHandler: ChatHandler = options.chatHandler ?? defaultChatHandler;
  let embeddingsHandler: EmbeddingsHandler = options.embeddingsHandler ?? defaultEmbeddingsHandler;
  const failures: { status: number; message?: string }[] = [];
  let delay = 0;
  let chunkDelay = 0;
  let dropAfter: number | null = null;
  let endAfter: number | null = null;
  let malformAfter: number | null = null;
  let bodyStall = 0;
  let moderationHandler: ((input: string) => boolean) | null = null;
  let padNext = 0;
  let floodNext = 0;
  const failuresWithBody: Array<{ status: number; body: { floodBytes: number } | { trickleMs: number } }> = [];
  const bodies: Array<{ path: string; sent: number; hungUp: boolean }> = [];
  const retryAfterMs = options.retryAfterMs === undefined ? 0 : options.retryAfterMs;
  let counter = 0;
  // Pending waits, cut short by close() so that a closed stub never holds the process open.
  const waits = new Map<NodeJS.Timeout, () => void>();
  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        waits.delete(timer);
        resolve();
      }, ms);
      waits.set(timer, resolve);
    });

  const sendJson = (res: ServerResponse, status: number, payload: unknown, headers: Record<string, string> = {}) => {
    if (gone(res)) return;
    const body = JSON.stringify(payload);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
    res.end(body);
  };
  /** A successful JSON answer; with the stall stallNextBody, or the padding padNextAnswer asked for. */
  const sendAnswer = async (res: ServerResponse, path: string, payload: unknown) => {
    const stall = bodyStall;
    bodyStall = 0;
    const pad = padNext;
    padNext = 0;
    if (stall > 0) {
      if (gone(res)) return;
      const text = JSON.stringify(payload);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.write(text.slice(0, 10));
      await sleep(stall);
      if (!gone(res)) res.end(text.slice(10));
      return;
    }
    if (pad === 0) return sendJson(res, 200, payload);
    if (gone(res)) return;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write(JSON.stringify(payload));
    const sent = await pour(res, pad, (left) => SPACES.slice(0, left));
    bodies.push({ path, sent, hungUp: sent < pad });
    if (!gone(res)) res.end();
  };
  const sendError = (res: ServerResponse, status: number, message: string) => {
    const type = ERROR_TYPES[status] ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    const headers: Record<string, string> = retryAfterMs === null ? {} : { 'retry-after-ms': String(retryAfterMs) };
    sendJson(res, status, { error: { message, type, param: null, code: null } }, headers);
  };

  async function chat(body: any, res: ServerResponse): Promise<void> {
    if (!body || typeof body.model !== 'string' || !Array.isArray(body.messages)) throw new StubHttpError(400, 'model and messages are required');
    const messages = body.messages as StubChatMessage[];
    const lastUser = [...messages].reverse().find((m) => m?.role === 'user');
    const stream = body.stream === true;
    const raw = await chatHandler({ body, model: body.model, messages, lastUserMessage: textOf(lastUser?.content), stream });
    const reply: ChatReply = typeof raw === 'string' ? { content: raw } : raw;
    const model = reply.model ?? body.model;
    const usage =
      reply.usage === null
        ? undefined
        : (() => {
            const prompt = reply.usage?.prompt_tokens ?? estimateTokens(messages.map((m) => textOf(m.content)).join('\n'));
            const completion = reply.usage?.completion_tokens ?? estimateTokens(textOf(reply.content));
            return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
          })();
    const id = `chatcmpl-stub-${++counter}`;
    const created = Math.floor(Date.now() / 1000);
    const toolCalls = (reply.toolCalls ?? []).map((c, i) => ({ id: `call_${counter}_${i}`, type: 'function', function: { name: c.name, arguments: c.arguments } }));
    const finish = reply.finishReason ?? (toolCalls.length ? 'tool_calls' : 'stop');

    if (!stream) {
      const answer = {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: reply.noChoices
          ? []
          : [
              {
                index: 0,
                message: { role: 'assistant', content: reply.content, refusal: null, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) },
                logprobs: null,
                finish_reason: finish,
              },
            ],
        ...(usage ? { usage } : {}),
      };
      return sendAnswer(res, '/v1/chat/completions', answer);
    }

    if (gone(res)) return;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices, ...extra })}\n\n`;
    const write = async (data: string) => {
      if (gone(res)) return false;
      res.write(data);
      if (chunkDelay > 0) await sleep(chunkDelay);
      return !gone(res);
    };
    const groups: unknown[] = [];
    if (reply.deltas) groups.push(...reply.deltas);
    else if (typeof reply.content === 'string') {
      const pieces = reply.content.match(/\s*\S+\s*/gu) ?? [];
      for (let i = 0; i < pieces.length; i += 3) groups.push(pieces.slice(i, i + 3).join(''));
    } else if (reply.content !== null) groups.push(reply.content);
    const drop = dropAfter;
    dropAfter = null;
    const end = endAfter;
    endAfter = null;
    const malform = malformAfter;
    malformAfter = null;
    if (!(await write(chunk([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }])))) return;
    const flood = floodNext;
    floodNext = 0;
    if (flood > 0) {
      // a word of content a chunk, padded with spaces inside its JSON to about 64 KiB
      const piece = chunk([{ index: 0, delta: { content: 'word ' }, logprobs: null, finish_reason: null }]);
      const padded = `${piece.slice(0, -3)}${SPACES.slice(piece.length)}}\n\n`;
      const sent = await pour(res, flood, () => padded);
      bodies.push({ path: '/v1/chat/completions', sent, hungUp: sent < flood });
      if (gone(res)) return;
    }
    let sent = 0;
    for (const g of groups) {
      if (drop !== null && sent >= drop) {
        res.socket?.destroy();
        return;
      }
      if (end !== null && sent >= end) {
        res.end();
        return;
      }
      if (malform !== null && sent === malform && !(await write(`data: {"id":"${id}","choices":[{"delta":{"content":"secret answer te\n\n`))) return;
      if (!(await write(chunk([{ index: 0, delta: { content: g }, logprobs: null, finish_reason: null }])))) return;
      sent++;
    }
    if (drop !== null) {
      res.socket?.destroy();
      return;
    }
    for (const [i, c] of toolCalls.entries()) {
      // As OpenAI streams them: id, type and name first, then the arguments in two fragments.
      const half = Math.ceil(c.function.arguments.length / 2);
      const first = { index: i, id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments.slice(0, half) } };
      if (!(await write(chunk([{ index: 0, delta: { tool_calls: [first] }, logprobs: null, finish_reason: null }])))) return;
      const second = { index: i, function: { arguments: c.function.arguments.slice(half) } };
      if (!(await write(chunk([{ index: 0, delta: { tool_calls: [second] }, logprobs: null, finish_reason: null }])))) return;
    }
    if (!(await write(chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: finish }])))) return;
    if (usage && body.stream_options?.include_usage === true) {
      if (!(await write(chunk([], { usage })))) return;
    }
    if (!gone(res)) res.end('data: [DONE]\n\n');
  }

  async function embeddings(body: any, res: ServerResponse): Promise<void> {
    if (!body || typeof body.model !== 'string' || body.input === undefined) throw new StubHttpError(400, 'model and input are required');
    const inputs: unknown[] = Array.isArray(body.input) && body.input.some((x: unknown) => typeof x !== 'number') ? body.input : [body.input];
    const texts = inputs.map((x) => (typeof x === 'string' ? x : JSON.stringify(x)));
    const dimensions = body.dimensions === undefined ? 8 : Number(body.dimensions);
    if (!Number.isInteger(dimensions) || dimensions < 1) throw new StubHttpError(400, 'dimensions must be a positive integer');
    const vectors = await embeddingsHandler({ body, model: body.model, texts, dimensions });
    const base64 = body.encoding_format === 'base64';
    const tokens = texts.reduce((n, t) => n + estimateTokens(t), 0);
    await sendAnswer(res, '/v1/embeddings', {
      object: 'list',
      model: body.model,
      data: vectors.map((v, index) => ({
        object: 'embedding',
        index,
        embedding: base64 ? Buffer.from(new Float32Array(v).buffer).toString('base64') : v,
      })),
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    let body: any;
    let badJson = false;
    if (rawBody) {
      try {
        body = JSON.parse(rawBody);
      } catch {
        badJson = true;
      }
    }
    const path = req.url ?? '/';
    requests.push({ method: req.method ?? 'GET', path, headers: req.headers, body });

    if (delay > 0) await sleep(delay);
    if (gone(res)) return;
    const failure = failures.shift();
    if (failure) return sendError(res, failure.status, failure.message ?? `Stub failure with status ${failure.status}`);
    const endless = failuresWithBody.shift();
    if (endless) {
      const type = endless.status >= 500 ? 'server_error' : (ERROR_TYPES[endless.status] ?? 'invalid_request_error');
      res.writeHead(endless.status, { 'content-type': 'application/json', ...(retryAfterMs === null ? {} : { 'retry-after-ms': String(retryAfterMs) }) });
      res.write(JSON.stringify({ error: { message: `Stub failure with status ${endless.status}`, type, param: null, code: null } }));
      let sent = 0;
      let hungUp = false;
      if ('floodBytes' in endless.body) {
        sent = await pour(res, endless.body.floodBytes, (left) => SPACES.slice(0, left));
        hungUp = sent < endless.body.floodBytes;
      } else {
        const until = Date.now() + endless.body.trickleMs;
        while (Date.now() < until && !gone(res)) {
          res.write(' ');
          sent++;
          await sleep(20);
        }
        hungUp = Date.now() < until;
      }
      bodies.push({ path, sent, hungUp });
      if (!gone(res)) res.end();
      return;
    }
    if (options.apiKey !== undefined && req.headers.authorization !== `Bearer ${options.apiKey}`) {
      return sendError(res, 401, 'Incorrect API key provided');
    }
    if (badJson) return sendError(res, 400, 'The request body is not valid JSON');

    const route = `${req.method} ${path.split('?')[0]}`;
    try {
      if (route === 'POST /v1/chat/completions') return await chat(body, res);
      if (route === 'POST /v1/embeddings') return await embeddings(body, res);
      if (route === 'POST /v1/moderations') {
        const inputs: string[] = Array.isArray(body?.input) ? body.input.map(String) : [String(body?.input ?? '')];
        const results = inputs.map((text) => {
          const flagged = moderationHandler ? moderationHandler(text) : false;
          return { flagged, categories: { harassment: flagged }, category_scores: { harassment: flagged ? 0.99 : 0.01 } };
        });
        return await sendAnswer(res, '/v1/moderations', { id: `modr-${++counter}`, model: body?.model ?? 'omni-moderation-latest', results });
      }
      if (route === 'GET /v1/models') {
        const created = Math.floor(Date.now() / 1000);
        return sendJson(res, 200, { object: 'list', data: (options.models ?? ['stub-chat', 'stub-embedding']).map((id) => ({ id, object: 'model', created, owned_by: 'stub' })) });
      }
      return sendError(res, 404, `Unknown route ${route}`);
    } catch (err) {
      if (err instanceof StubHttpError) return sendError(res, err.status, err.message);
      return sendError(res, 500, `Stub handler failed: ${(err as Error).message}`);
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) sendError(res, 500, `Stub failed: ${(err as Error).message}`);
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    setChatHandler(handler) {
      chatHandler = handler ?? defaultChatHandler;
    },
    setEmbeddingsHandler(handler) {
      embeddingsHandler = handler ?? defaultEmbeddingsHandler;
    },
    failNext(n, status = 500, message) {
      for (let i = 0; i < n; i++) failures.push({ status, message });
    },
    delayMs(ms) {
      delay = ms;
    },
    streamChunkDelayMs(ms) {
      chunkDelay = ms;
    },
    dropNextStreamAfter(chunks) {
      dropAfter = chunks;
    },
    endNextStreamAfter(chunks) {
      endAfter = chunks;
    },
    malformNextStreamAfter(chunks) {
      malformAfter = chunks;
    },
    stallNextBody(ms) {
      bodyStall = ms;
    },
    setModerationHandler(handler) {
      moderationHandler = handler;
    },
    padNextAnswer(bytes) {
      padNext = bytes;
    },
    floodNextStream(bytes) {
      floodNext = bytes;
    },
    failNextWithBody(status, body) {
      failuresWithBody.push({ status, body });
    },
    bodies,
    requestsTo(prefix) {
      return requests.filter((r) => r.path.startsWith(prefix));
    },
    close() {
      return new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
        for (const [timer, wake] of waits) {
          clearTimeout(timer);
          wake();
        }
        waits.clear();
      });
    },
  };
}
