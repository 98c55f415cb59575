import { createRequire } from 'node:module';
import type { ChatMessage } from './types.js';

type Encoding = typeof import('gpt-tokenizer/encoding/o200k_base');

/*
 * The o200k_base encoding is loaded on first use, not at start: its module and tables take about 0.3 s
 * of CPU to load, a fifth of the server's start-up (bench/RESULTS.md), and only answers, chunk clean-ups,
 * chunk edits and ingestion count tokens. Each of those paths awaits `loadEncoding()` before counting.
 * A path that did not would still count right: `o200k()` then loads the CommonJS build synchronously
 * (slower, once), so a missed await costs time, never a wrong count.
 */
let encoding: Encoding | undefined;
let loading: Promise<Encoding> | undefined;

/** Loads the encoding once (later calls return the same promise). */
export function loadEncoding(): Promise<Encoding> {
  loading ??= import('gpt-tokenizer/encoding/o200k_base').then((m) => (encoding ??= m));
  return loading;
}

/** Whether the encoding is loaded (the server starts without it). */
export function encodingLoaded(): boolean {
  return encoding !== undefined;
}

/** The encoding, loaded (synchronously, if no one awaited loadEncoding yet). */
export function o200k(): Encoding {
  encoding ??= createRequire(import.meta.url)('gpt-tokenizer/encoding/o200k_base') as Encoding;
  return encoding;
}

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
  return text === '' ? 0 : o200k().countTokens(text, PLAIN_TEXT);
}

/**
 * Input tokens of a chat call: every message with its framing. Retrieved passages are counted where they
 * are, in the prompt's messages; a request's `context` is a structured copy of them, not more input.
 */
export function countInputTokens(messages: readonly ChatMessage[]): number {
  let total = TOKENS_REPLY_PRIMER;
  for (const m of messages) total += TOKENS_PER_MESSAGE + countTextTokens(m.content);
  return total;
}

/** Cuts text to at most maxTokens tokens, never leaving a broken character at the end. */
export function truncateToTokens(text: string, maxTokens: number): string {
  if (maxTokens <= 0) return '';
  const { encode, decode } = o200k();
  const tokens = encode(text, PLAIN_TEXT);
  if (tokens.length <= maxTokens) return text;
  return decode(tokens.slice(0, maxTokens)).replace(/\uFFFD+$/u, '').trimEnd();
}
