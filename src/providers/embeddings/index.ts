import { LocalEmbedder } from './local.js';
import { OnnxEmbedder } from './onnx.js';
import { OpenAiCompatibleEmbedder } from './openai-compatible.js';
import type { Embedder, EmbeddingsConfig } from './types.js';

export { LocalEmbedder } from './local.js';
export { OpenAiCompatibleEmbedder } from './openai-compatible.js';
export { OnnxEmbedder } from './onnx.js';
export type { Embedder, EmbeddingsConfig } from './types.js';

/** The embedder the configuration names: the embedded hashed n-gram model, or an OpenAI-compatible server. */
export function createEmbedder(config: EmbeddingsConfig): Embedder {
  switch (config.provider) {
    case 'local':
      return new LocalEmbedder(config.dimensions, config.localVersion);
    case 'openai-compatible':
      if (!config.baseUrl) {
        throw new Error('EMBEDDINGS_PROVIDER=openai-compatible needs EMBEDDINGS_BASE_URL (the server base URL, e.g. http://localhost:8000/v1)');
      }
      if (!config.model) throw new Error('EMBEDDINGS_PROVIDER=openai-compatible needs EMBEDDINGS_MODEL (the embedding model name the server knows)');
      return new OpenAiCompatibleEmbedder(config);
    case 'onnx':
      if (!config.modelPath) throw new Error('EMBEDDINGS_PROVIDER=onnx needs EMBEDDINGS_MODEL_PATH (a directory with model.onnx and vocab.txt or tokenizer.json)');
      return new OnnxEmbedder({ modelPath: config.modelPath, dimensions: config.dimensions });
    default:
      throw new Error(`Unknown embeddings provider "${String((config as { provider: unknown }).provider)}"`);
  }
}
