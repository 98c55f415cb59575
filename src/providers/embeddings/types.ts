import type { LocalEmbedderVersion } from './local.js';

/** Settings of the embedding provider, read from EMBEDDINGS_* environment variables by src/config.ts. */
export interface EmbeddingsConfig {
  provider: 'local' | 'openai-compatible' | 'onnx';
  /** onnx: directory of the model (model.onnx + vocab.txt or tokenizer.json) */
  modelPath?: string;
  baseUrl?: string;
  apiKey?: string;
  model?: string;
  /** local: the hashed embedder's version (2: without English stop words; 1: the first one, every word). */
  localVersion?: LocalEmbedderVersion;
  /** Vector length; 384 by default. The database column is vector(dimensions). */
  dimensions: number;
  /** Texts per provider call. */
  batchSize: number;
  timeoutMs: number;
  maxRetries: number;
}

/**
 * Turns texts into L2-normalised vectors of `dimensions` numbers.
 * `id` names the model and its parameters: vectors of two different ids are never compared or mixed.
 */
export interface Embedder {
  readonly id: string;
  readonly dimensions: number;
  embed(texts: string[], options?: { signal?: AbortSignal }): Promise<number[][]>;
}
