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

/**
 * `model` with every call also stopped by `stop` (besides the call's own signal): the shutdown's signal for the
 * requests still in flight when its time runs out (platform/shutdown.ts), whichever route made the call. An
 * aborted call rejects with the signal's reason (the providers' contract), here a 503.
 */
export function stoppedBy(model: ChatModel, stop: AbortSignal): ChatModel {
  const withStop = (request: ChatRequest): ChatRequest => ({ ...request, signal: request.signal ? AbortSignal.any([request.signal, stop]) : stop });
  return {
    provider: model.provider,
    defaultModel: model.defaultModel,
    complete: (request) => model.complete(withStop(request)),
    stream: (request) => model.stream(withStop(request)),
  };
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
 * A sanitize call's text at most: its answer, about as long, must fit SANITIZE_MAX_TOKENS with room to
 * spare. A longer chunk (PUT accepts 100,000 characters) is sanitized in pieces of this size.
 */
export const SANITIZE_PIECE_CHARS = 8_000;
export const SANITIZE_PIECE_TOKENS = 7_000;

/** A piece of a text to sanitize, its tokens, and what goes between its sanitized text and the next piece's. */
export interface SanitizePiece {
  text: string;
  tokens: number;
  joiner: string;
}

/**
 * `text` in pieces of at most SANITIZE_PIECE_CHARS characters and SANITIZE_PIECE_TOKENS tokens, cut at
 * the last paragraph break before the bound, else the last line break, the last sentence end, the last
 * space, else at the bound (never inside a surrogate pair). Each piece's joiner is the kind of break it
 * was cut at ("\n\n", "\n" or " "; "" for a cut inside a word and for the last piece).
 */
export function sanitizePieces(text: string, maxChars = SANITIZE_PIECE_CHARS, maxTokens = SANITIZE_PIECE_TOKENS): SanitizePiece[] {
  const pieces: SanitizePiece[] = [];
  let rest = text;
  let limit = maxChars;
  while (rest.length > 0) {
    const restTokens = rest.length <= limit ? countTextTokens(rest) : Number.POSITIVE_INFINITY;
    if (restTokens <= maxTokens) {
      pieces.push({ text: rest, tokens: restTokens, joiner: '' });
      break;
    }
    const window = rest.slice(0, Math.min(limit, rest.length));
    let cut = 0;
    let joiner = '';
    // the last break of each kind, strongest first; `end` is where the piece ends relative to the match
    for (const [pattern, join, end] of [
      [/\n\s*\n/gu, '\n\n', 0],
      [/\n/gu, '\n', 0],
      [/[.!?…](?=\s)/gu, ' ', 1],
      [/\s/gu, ' ', 0],
    ] as const) {
      let last = 0;
      for (const m of window.matchAll(pattern)) last = Math.max(last, m.index + end);
      if (last > 0) {
        cut = last;
        joiner = join;
        break;
      }
    }
    if (cut === 0) {
      cut = window.length;
      const code = rest.charCodeAt(cut - 1);
      if (cut < rest.length && code >= 0xd800 && code <= 0xdbff) cut = cut > 1 ? cut - 1 : 2; // not between the halves of a pair
    }
    const piece = rest.slice(0, cut);
    const tokens = countTextTokens(piece);
    if (tokens > maxTokens && limit > 1) {
      limit = Math.max(1, Math.floor(limit / 2)); // dense text (many tokens a character): smaller pieces
      continue;
    }
    pieces.push({ text: piece, tokens, joiner });
    rest = rest.slice(cut).replace(/^\s+/u, '');
    limit = maxChars;
  }
  return pieces;
}

/**
 * The chat request that sanitizes `text`: the system prompt above, the text as the user message,
 * temperature 0, and room for twice the text's tokens plus 256 (at most 16000). `tokens`: the text's, when
 * already counted (sanitizePieces).
 */
export function buildSanitizeRequest(text: string, model?: string, tokens = countTextTokens(text)): ChatRequest {
  return {
    purpose: 'sanitize',
    messages: [
      { role: 'system', content: SANITIZE_SYSTEM_PROMPT },
      { role: 'user', content: text },
    ],
    ...(model !== undefined ? { model } : {}),
    temperature: 0,
    maxTokens: Math.min(2 * tokens + 256, SANITIZE_MAX_TOKENS),
  };
}
