import { countTokens as countO200k, decode, encode } from 'gpt-tokenizer/encoding/o200k_base';
import type { ChatMessage, ContextPassage } from './types.js';

/**
 * Token counting with the o200k_base encoding (GPT-4o and later). Special-token markers such as
 * "<|endoftext|>" inside user text are counted as ordinary text instead of throwing.
 */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/** Per-message framing overhead (role and separators), as in OpenAI's counting guide. */
const TOKENS_PER_MESSAGE = 3;
/** Tokens that prime the assistant's reply. */
const TOKENS_REPLY_PRIMER = 3;

export function countTextTokens(text: string): number {
  return text === '' ? 0 : countO200k(text, PLAIN_TEXT);
}

/** Input tokens of a chat call: every message (with framing) plus the text of retrieved passages. */
export function countInputTokens(messages: readonly ChatMessage[], context: readonly ContextPassage[] = []): number {
  let total = TOKENS_REPLY_PRIMER;
  for (const m of messages) total += TOKENS_PER_MESSAGE + countTextTokens(m.content);
  for (const p of context) total += countTextTokens(p.text) + (p.source ? countTextTokens(p.source) : 0);
  return total;
}

/** Cuts text to at most maxTokens tokens, never leaving a broken character at the end. */
export function truncateToTokens(text: string, maxTokens: number): string {
  if (maxTokens <= 0) return '';
  const tokens = encode(text, PLAIN_TEXT);
  if (tokens.length <= maxTokens) return text;
  return decode(tokens.slice(0, maxTokens)).replace(/\uFFFD+$/u, '').trimEnd();
}
