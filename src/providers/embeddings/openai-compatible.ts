import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import { boundedFetch, byteSize, type BoundedFetch } from '../../shared/bounded-body.js';
import { UpstreamError } from '../llm/types.js';
import type { Embedder, EmbeddingsConfig } from './types.js';

/** The least an embeddings answer may be: room for a default batch (64 texts of 384 numbers, about 600 KB) many times over. */
const MIN_ANSWER_BYTES = 64 * 1024 * 1024;
/** Bytes a number of a batch may take: a float as JSON prints it (`-0.012345678901234567, `, about 25), even pretty-printed a line each. */
const BYTES_PER_NUMBER = 64;

/**
 * The most bytes an embeddings answer may have: 64 MiB, or 64 bytes a number of a full batch
 * (`batchSize` × `dimensions`) when that is more.
 */
export function embeddingsByteLimit(batchSize: number, dimensions: number): number {
  return Math.max(MIN_ANSWER_BYTES, batchSize * dimensions * BYTES_PER_NUMBER);
}

/**
 * Embeddings from any server speaking the OpenAI `POST /embeddings` wire format (OpenAI, vLLM,
 * llama.cpp, Ollama, LM Studio, LiteLLM, TEI...), through the official `openai` SDK.
 *
 * - texts go in batches of `batchSize`, one request after the other, in input order;
 * - each request asks for `dimensions` floats; the answer is put in order by `index`, and must hold
 *   one vector per text, each exactly `dimensions` long of finite numbers (else an {@link UpstreamError}
 *   naming both lengths: the provider's answer is at fault, not the request, so the API answers 502);
 * - vectors are L2-normalised here, whatever the server does;
 * - an empty (or blank) text is not sent (servers reject it) and gets the zero vector;
 * - the SDK retries 408/409/429/5xx and connection failures `maxRetries` times; what still fails is
 *   an {@link UpstreamError}; an aborted signal rejects with the signal's reason;
 * - `timeoutMs` bounds each attempt until the headers (the SDK's timeout), then the body of the answer
 *   (also of an error answer, which the SDK reads for its message) within `timeoutMs` of its headers; the
 *   body is at most {@link embeddingsByteLimit} bytes: past it the connection is closed and the call fails
 *   (an {@link UpstreamError} naming the limit).
 */
export class OpenAiCompatibleEmbedder implements Embedder {
  readonly id: string;
  readonly dimensions: number;
  private readonly model: string;
  private readonly batchSize: number;
  private readonly timeoutMs: number;
  private readonly maxBytes: number;
  private readonly client: OpenAI;

  constructor(config: EmbeddingsConfig) {
    if (!config.baseUrl) throw new Error('The openai-compatible embedder needs a base URL (EMBEDDINGS_BASE_URL)');
    if (!config.model) throw new Error('The openai-compatible embedder needs a model name (EMBEDDINGS_MODEL)');
    if (!Number.isInteger(config.dimensions) || config.dimensions < 1) {
      throw new Error(`EMBEDDINGS_DIMENSIONS must be a positive integer, got ${config.dimensions}`);
    }
    this.model = config.model;
    this.dimensions = config.dimensions;
    this.batchSize = Math.max(1, Math.floor(config.batchSize) || 1);
    this.timeoutMs = config.timeoutMs;
    this.maxBytes = embeddingsByteLimit(this.batchSize, this.dimensions);
    this.id = `openai-compatible:${config.model}:${config.dimensions}`;
    this.client = new OpenAI({
      baseURL: config.baseUrl,
      apiKey: config.apiKey ?? 'not-needed',
      timeout: config.timeoutMs,
      maxRetries: config.maxRetries,
      // the SDK would write what it cannot parse (answer text) to the console, past the app's logger; its failures are thrown
      logLevel: 'off',
    });
  }

  async embed(texts: string[], options?: { signal?: AbortSignal }): Promise<number[][]> {
    const signal = options?.signal;
    const out: number[][] = texts.map(() => []);
    const pending: number[] = []; // positions of the texts that are sent
    texts.forEach((text, i) => {
      if (text.trim() === '') out[i] = new Array<number>(this.dimensions).fill(0);
      else pending.push(i);
    });
    for (let start = 0; start < pending.length; start += this.batchSize) {
      signal?.throwIfAborted();
      const positions = pending.slice(start, start + this.batchSize);
      const vectors = await this.request(positions.map((i) => texts[i]!), signal);
      positions.forEach((position, k) => {
        out[position] = vectors[k]!;
      });
    }
    return out;
  }

  private async request(input: string[], signal: AbortSignal | undefined): Promise<number[][]> {
    let res: OpenAI.CreateEmbeddingResponse;
    const bounds = this.bounded();
    try {
      res = await this.client
        .withOptions({ fetch: bounds.fetch })
        .embeddings.create({ model: this.model, input, dimensions: this.dimensions, encoding_format: 'float' }, signal ? { signal } : undefined);
    } catch (err) {
      throw this.mapError(err, signal, bounds);
    }
    const data = Array.isArray(res?.data) ? [...res.data] : [];
    if (data.length !== input.length) {
      throw new UpstreamError(`The embedding provider returned ${data.length} vectors for ${input.length} texts (model ${this.model})`);
    }
    data.sort((a, b) => a.index - b.index);
    return data.map((item, k) => {
      if (item.index !== k) throw new UpstreamError(`The embedding provider returned an unexpected index ${item.index} (model ${this.model})`);
      const vector = item.embedding;
      if (!Array.isArray(vector) || vector.length !== this.dimensions) {
        throw new UpstreamError(
          `The embedding provider returned vectors of length ${Array.isArray(vector) ? vector.length : 'unknown'}, ` +
            `expected ${this.dimensions} (EMBEDDINGS_DIMENSIONS; model ${this.model})`,
        );
      }
      return normalise(vector);
    });
  }

  /** A fetch for one call whose response bodies are bounded: at most maxBytes, within timeoutMs of their headers. */
  private bounded(): BoundedFetch {
    return boundedFetch((response) => ({
      maxBytes: this.maxBytes,
      deadlineMs: this.timeoutMs,
      tooLarge: () =>
        new UpstreamError(
          `The embedding provider's ${response.ok ? 'answer' : `error answer (HTTP ${response.status})`} was larger than ${byteSize(this.maxBytes)}, ` +
            `the most read of a batch of ${this.batchSize} texts of ${this.dimensions} numbers; the connection was closed`,
          response.ok ? undefined : response.status,
        ),
      tooSlow: () => new UpstreamError(`The embedding provider did not send its answer within ${this.timeoutMs} ms of starting it`, response.ok ? undefined : response.status),
    }));
  }

  /** What the SDK threw as an UpstreamError (or the caller's abort reason); a bound a body broke is the failure, however the SDK reported it. */
  private mapError(err: unknown, signal: AbortSignal | undefined, bounds: BoundedFetch): unknown {
    if (signal?.aborted) return signal.reason ?? err;
    const breach = bounds.breach();
    if (breach) return breach;
    if (err instanceof APIUserAbortError) return new UpstreamError('The embedding provider call was aborted');
    if (err instanceof APIConnectionTimeoutError) return new UpstreamError(`The embedding provider did not answer within ${this.timeoutMs} ms`);
    if (err instanceof APIConnectionError) {
      const cause = err.cause instanceof Error ? err.cause.message : err.message;
      return new UpstreamError(`Could not connect to the embedding provider (${cause})`);
    }
    if (err instanceof APIError) {
      const detail = typeof err.error === 'object' && err.error !== null && 'message' in err.error ? String((err.error as { message: unknown }).message) : '';
      return new UpstreamError(
        `The embedding provider answered${err.status !== undefined ? ` HTTP ${err.status}` : ' with an error'}${detail ? `: ${detail.slice(0, 300)}` : ''}`,
        err.status,
      );
    }
    if (err instanceof UpstreamError) return err;
    // anything else the SDK throws (an answer it cannot parse, ...) is still the provider's failure
    return new UpstreamError(`The embedding provider call failed: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** The vector scaled to length 1 (a zero vector stays zero); non-finite numbers are an error. */
export function normalise(vector: readonly number[]): number[] {
  let norm = 0;
  for (const x of vector) {
    if (typeof x !== 'number' || !Number.isFinite(x)) throw new UpstreamError('The embedding provider returned a vector with a non-numeric value');
    norm += x * x;
  }
  if (norm === 0) return [...vector];
  const inv = 1 / Math.sqrt(norm);
  return vector.map((x) => x * inv);
}
