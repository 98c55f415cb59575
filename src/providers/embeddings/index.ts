// PLACEHOLDER, replaced by the embeddings work.
import type { Embedder, EmbeddingsConfig } from './types.js';

export function createEmbedder(_config: EmbeddingsConfig): Embedder {
  throw new Error('embedder not implemented yet');
}
