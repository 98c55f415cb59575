import { LocalChatModel } from './local.js';
import { OpenAiCompatibleChatModel } from './openai-compatible.js';
import { countTextTokens } from './tokens.js';
import type { ChatModel, ChatRequest, LlmConfig } from './types.js';

export { LocalChatModel, cleanText } from './local.js';
export { OpenAiCompatibleChatModel } from './openai-compatible.js';
export { countTextTokens } from './tokens.js';
export * from './types.js';

/** The chat model the configuration names: the embedded local model, or an OpenAI-compatible server. */
export function createChatModel(config: LlmConfig): ChatModel {
  switch (config.provider) {
    case 'local':
      return new LocalChatModel();
    case 'openai-compatible':
      if (!config.baseUrl) throw new Error('LLM_PROVIDER=openai-compatible needs LLM_BASE_URL (the server base URL, e.g. http://localhost:8000/v1)');
      if (!config.model) throw new Error('LLM_PROVIDER=openai-compatible needs LLM_MODEL (the model name the server knows)');
      return new OpenAiCompatibleChatModel(config);
    default:
      throw new Error(`Unknown chat model provider "${String((config as { provider: unknown }).provider)}"`);
  }
}

/** System prompt of the sanitize call (POST /api/user/embedding/{id}/sanitize). */
export const SANITIZE_SYSTEM_PROMPT = [
  'You clean up text extracted from documents and web pages.',
  'Remove navigation, breadcrumbs, menus, cookie banners, share buttons, page numbers, repeated headers and footers, copyright footers and other boilerplate.',
  'Repair encoding artifacts (for example "Ã©" → "é", "â€™" → "’") and drop stray control or replacement characters.',
  'Normalise whitespace and fix broken formatting: re-join words and lines that were split mid-sentence, keep paragraphs and lists.',
  'Do NOT summarise, shorten, rephrase, translate or add anything: every sentence of real content must stay, in its original language and order.',
  'Answer with the cleaned text only, without any introduction, explanation or quotation marks.',
].join('\n');

/** Largest completion budget a sanitize call asks for. */
export const SANITIZE_MAX_TOKENS = 16_000;

/**
 * The chat request that sanitizes `text`: the system prompt above, the text as the user message,
 * temperature 0, and room for twice the text's tokens plus 256 (at most 16000).
 */
export function buildSanitizeRequest(text: string, model?: string): ChatRequest {
  return {
    purpose: 'sanitize',
    messages: [
      { role: 'system', content: SANITIZE_SYSTEM_PROMPT },
      { role: 'user', content: text },
    ],
    ...(model !== undefined ? { model } : {}),
    temperature: 0,
    maxTokens: Math.min(2 * countTextTokens(text) + 256, SANITIZE_MAX_TOKENS),
  };
}
