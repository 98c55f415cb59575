// PLACEHOLDER, replaced by the LLM provider work.
import type { ChatModel, LlmConfig } from './types.js';

export function createChatModel(_config: LlmConfig): ChatModel {
  throw new Error('chat model not implemented yet');
}
