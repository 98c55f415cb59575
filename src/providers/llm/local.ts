import { countInputTokens, countTextTokens, loadEncoding, truncateToTokens } from './tokens.js';
import type { ChatModel, ChatRequest, ChatResult, ChatStreamEvent, ContextPassage } from './types.js';
import { englishStopWordsAnd } from '../../shared/stop-words.js';
import { yieldToLoop } from '../../shared/slices.js';

/**
 * The embedded chat model: no network, no randomness. Same request → same result.
 *
 * - purpose 'sanitize': cleans the last user message with {@link cleanText} (repairs encoding
 *   damage, drops boilerplate, normalises whitespace; never summarises).
 * - purpose 'answer': an extractive answerer: picks the sentences of `request.context` that share
 *   the most terms with the question, says that the answer is composed from the user's documents and
 *   cites each passage used. With nothing relevant it says so and invents nothing.
 *
 * It always reports its own model name: it does not pretend to be the model a caller asked for.
 */
export class LocalChatModel implements ChatModel {
  readonly provider = 'local';
  readonly defaultModel = 'local-extractive-v1';

  async complete(request: ChatRequest): Promise<ChatResult> {
    throwIfAborted(request.signal);
    await loadEncoding();
    const raw = request.purpose === 'sanitize' ? cleanText(lastUserMessage(request)) : extractiveAnswer(lastUserMessage(request), request.context ?? [], request.maxTokens);
    const text = request.maxTokens !== undefined ? truncateToTokens(raw, request.maxTokens) : raw;
    const inputTokens = countInputTokens(request.messages);
    const outputTokens = countTextTokens(text);
    return { text, model: this.defaultModel, usage: { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }, ...(text.length < raw.length ? { truncated: true } : {}) };
  }

  async *stream(request: ChatRequest): AsyncGenerator<ChatStreamEvent> {
    const result = await this.complete(request);
    for (const piece of chunkForStreaming(result.text)) {
      // Give the event loop a turn between deltas, as a network stream would, and notice aborts.
      await yieldToLoop();
      throwIfAborted(request.signal);
      yield { type: 'delta', text: piece };
    }
    yield { type: 'done', result };
  }
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw signal.reason ?? new DOMException('The operation was aborted', 'AbortError');
}

function lastUserMessage(request: ChatRequest): string {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const m = request.messages[i]!;
    if (m.role === 'user') return m.content;
  }
  return '';
}

/** Splits text into pieces of a few words each; the pieces concatenate to exactly the text. */
function chunkForStreaming(text: string, wordsPerPiece = 4): string[] {
  const words = text.match(/\s*\S+\s*/gu) ?? (text ? [text] : []);
  const pieces: string[] = [];
  for (let i = 0; i < words.length; i += wordsPerPiece) pieces.push(words.slice(i, i + wordsPerPiece).join(''));
  return pieces;
}

// ---------------------------------------------------------------------------------------------
// Sanitizing
// ---------------------------------------------------------------------------------------------

/** Windows-1252 characters of the bytes 0x80–0x9F (the five undefined bytes decode to C1 controls). */
const CP1252_HIGH: Record<string, number> = {
  '\u20AC': 0x80, '\u201A': 0x82, '\u0192': 0x83, '\u201E': 0x84, '\u2026': 0x85, '\u2020': 0x86, '\u2021': 0x87,
  '\u02C6': 0x88, '\u2030': 0x89, '\u0160': 0x8a, '\u2039': 0x8b, '\u0152': 0x8c, '\u017D': 0x8e, '\u2018': 0x91,
  '\u2019': 0x92, '\u201C': 0x93, '\u201D': 0x94, '\u2022': 0x95, '\u2013': 0x96, '\u2014': 0x97, '\u02DC': 0x98,
  '\u2122': 0x99, '\u0161': 0x9a, '\u203A': 0x9b, '\u0153': 0x9c, '\u017E': 0x9e, '\u0178': 0x9f,
};

/** Byte a character stood for when UTF-8 bytes were decoded as Windows-1252 or Latin-1. */
function byteOf(ch: string): number {
  const mapped = CP1252_HIGH[ch];
  if (mapped !== undefined) return mapped;
  return ch.charCodeAt(0); // U+0080–U+00FF: Latin-1, identical to the byte
}

const CONT = '[\\u0080-\\u00BF\\u20AC\\u201A\\u0192\\u201E\\u2026\\u2020\\u2021\\u02C6\\u2030\\u0160\\u2039\\u0152\\u017D\\u2018\\u2019\\u201C\\u201D\\u2022\\u2013\\u2014\\u02DC\\u2122\\u0161\\u203A\\u0153\\u017E\\u0178]';
/** A UTF-8 lead byte (as its Latin-1 character) followed by the right number of continuation bytes. */
const MOJIBAKE = new RegExp(`[\\u00C2-\\u00DF]${CONT}|[\\u00E0-\\u00EF]${CONT}{2}|[\\u00F0-\\u00F4]${CONT}{3}`, 'gu');
const UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Whether a repaired character is one that real text contains; this keeps genuine pairs such as
 * German „Straße“ (ß followed by “) from being "repaired" into an unrelated script.
 */
function plausible(ch: string): boolean {
  const cp = ch.codePointAt(0)!;
  return (
    (cp >= 0x00a0 && cp <= 0x024f) || // Latin-1 supplement, Latin extended A/B
    (cp >= 0x0370 && cp <= 0x04ff) || // Greek, Cyrillic
    (cp >= 0x2000 && cp <= 0x215f) || // punctuation, currency, letterlike, number forms
    (cp >= 0x2190 && cp <= 0x27bf) || // arrows, maths, technical, boxes, dingbats
    (cp >= 0x3000 && cp <= 0x9fff) || // CJK
    (cp >= 0xac00 && cp <= 0xd7af) || // Hangul
    (cp >= 0x1f000 && cp <= 0x1faff) // emoji
  );
}

/** Repairs UTF-8 text that was decoded as Windows-1252/Latin-1 ("Ã©" → "é", "â€™" → "’"), also twice over. */
export function repairMojibake(text: string): string {
  let current = text;
  for (let pass = 0; pass < 3; pass++) {
    const next = current.replace(MOJIBAKE, (seq) => {
      try {
        const decoded = UTF8.decode(Uint8Array.from([...seq].map(byteOf)));
        return [...decoded].length === 1 && plausible(decoded) ? decoded : seq;
      } catch {
        return seq;
      }
    });
    if (next === current) break;
    current = next;
  }
  // Leftovers whose last byte was lost on the way: "â€" + dropped 0x9D is a closing quote; "Â" before a
  // space was the first half of a no-break space (kept when it is part of an upper-case word).
  return current.replace(/\u00E2\u20AC(?![\u0080-\u00BF])/gu, '\u201D').replace(/(?<!\p{Lu})\u00C2(?=[ \u00A0])/gu, '');
}

const BREADCRUMB_SPLIT = /\s+[>»›]\s+|\s*[»›]\s*/u;
const NAV_LINE = /^(?:skip to (?:the )?(?:main )?(?:content|navigation|main|search)|jump to (?:navigation|search|content|main content)|back to top|scroll to top|toggle navigation|main (?:menu|navigation)|menu|open menu|close menu)$/iu;
const COOKIE_BUTTON = /^(?:accept(?: all)?(?: cookies)?|reject(?: all)?(?: cookies)?|allow all(?: cookies)?|decline(?: all)? cookies|cookie (?:settings|preferences)|manage cookies)$/iu;
const COOKIE_BANNER = /\bcookies?\b.*\b(?:by (?:continuing|using|browsing|clicking|visiting)|accept|agree|consent|got it|allow all)\b|\b(?:by (?:continuing|using|browsing|clicking|visiting)|accept|agree|consent)\b.*\bcookies?\b/iu;
const PAGE_NUMBER = /^(?:page\s*)?\d{1,4}(?:\s*(?:of|\/)\s*\d{1,4})?$|^[-–—]\s*\d{1,4}\s*[-–—]$|^\[\s*\d{1,4}\s*\]$/iu;
const COPYRIGHT = /^(?:©|\(c\)|copyright\s*(?:©|\(c\))?\s*\d{4})|\ball rights reserved\b/iu;
const SOCIAL = '(?:facebook|twitter|x|linkedin|instagram|whatsapp|pinterest|reddit|telegram|youtube|tiktok|xing|e-?mail)';
const SHARE_LINE = new RegExp(
  `^(?:share(?: (?:this|it))?(?: (?:article|page|post|story))?(?: (?:on|via|with) ${SOCIAL}(?:\\s*(?:,|/|\\||or|and)\\s*${SOCIAL})*)?|(?:follow|like) us(?: on ${SOCIAL}(?:\\s*(?:,|/|\\||or|and)\\s*${SOCIAL})*)?|tweet(?: this)?|print(?: this (?:page|article))?|${SOCIAL}(?:\\s*(?:,|/|\\||·|•)?\\s*${SOCIAL})+)\\s*[:.!]?$`,
  'iu',
);
const FENCE = /^\s*(?:```|~~~)/u;
const LIST_ITEM = /^(?:[-*+•▪◦‣–]\s|\d{1,3}[.)]\s|[a-z][.)]\s|\(\w{1,3}\)\s)/u;

const HOME = /^(?:home|home ?page|start|startseite|accueil|inicio|main|index)$/iu;

function isBreadcrumb(line: string): boolean {
  if (/[.!?:;]$/u.test(line)) return false;
  const youAreHere = /^you are here:/iu.test(line);
  const rest = line.replace(/^you are here:\s*/iu, '');
  const short = (parts: string[]) => parts.every((p) => p !== '' && p.length <= 50 && p.split(' ').length <= 6 && /\p{L}/u.test(p));
  // "A > B > C" and "A » B": three levels, or two starting at the home page.
  const arrows = rest.split(BREADCRUMB_SPLIT).map((p) => p.trim());
  if (arrows.length >= 2 && short(arrows)) return arrows.length >= 3 || HOME.test(arrows[0]!) || youAreHere;
  // "Home / Products / X" and "Home | Contact": only when they start at the home page.
  const slashes = rest.split(/\s+[/|]\s+/u).map((p) => p.trim());
  return slashes.length >= 2 && short(slashes) && (HOME.test(slashes[0]!) || youAreHere);
}

function isBoilerplate(line: string): boolean {
  if (line.length > 300) return false;
  return (
    NAV_LINE.test(line) ||
    COOKIE_BUTTON.test(line) ||
    COOKIE_BANNER.test(line) ||
    PAGE_NUMBER.test(line) ||
    (COPYRIGHT.test(line) && line.length <= 200) ||
    SHARE_LINE.test(line) ||
    isBreadcrumb(line)
  );
}

/** Key under which a line counts as "the same" header/footer; page numbers are ignored in page lines. */
function repeatKey(line: string): string {
  const key = line.toLowerCase();
  return /\bpage\b/u.test(key) ? key.replace(/\d+/gu, '#') : key;
}

function endsSentence(line: string): boolean {
  return /[.!?:;)\]"”’»]$/u.test(line);
}

function isStructural(line: string): boolean {
  return /^#{1,6}\s/u.test(line) || line.includes('|') || LIST_ITEM.test(line) || /^>/u.test(line);
}

/**
 * Cleans extracted document text without summarising or shortening its content:
 * repairs mojibake, drops U+FFFD, control and zero-width characters, normalises whitespace (runs of
 * spaces/tabs collapsed, line ends trimmed, at most one blank line between paragraphs), re-joins
 * lines hard-wrapped mid-sentence, and removes boilerplate lines (breadcrumbs, "Skip to content",
 * cookie banners, page numbers, copyright footers, share buttons, and lines repeated 3+ times as
 * running headers/footers). Fenced code blocks keep their lines as they are (trailing spaces aside).
 */
export function cleanText(text: string): string {
  const normalised = repairMojibake(text)
    .normalize('NFC')
    .replace(/\r\n?|[\u2028\u2029\u0085]/gu, '\n')
    .replace(/[\u00A0\u2000-\u200A\u202F\u205F\u3000]/gu, ' ')
    .replace(/[\uFFFD\u200B\u2060\uFEFF\u00AD]|[\u0000-\u0008\u000B-\u001F\u007F-\u009F]/gu, '');

  // 1. Per line: whitespace, code fences.
  interface Line { text: string; code: boolean }
  const lines: Line[] = [];
  let inFence = false;
  for (const rawLine of normalised.split('\n')) {
    if (FENCE.test(rawLine)) {
      inFence = !inFence;
      lines.push({ text: rawLine.trim(), code: true });
    } else if (inFence) {
      lines.push({ text: rawLine.replace(/[ \t]+$/u, ''), code: true });
    } else {
      lines.push({ text: rawLine.replace(/[ \t]+/gu, ' ').trim(), code: false });
    }
  }

  // 2. Boilerplate: known patterns, and lines repeated 3+ times (running headers and footers).
  const counts = new Map<string, number>();
  for (const l of lines) {
    if (!l.code && l.text) counts.set(repeatKey(l.text), (counts.get(repeatKey(l.text)) ?? 0) + 1);
  }
  const kept = lines.filter((l) => {
    if (l.code || !l.text) return true;
    if (isBoilerplate(l.text)) return false;
    // Running headers and footers are short and do not start in lower case: a repeated long passage,
    // or a repeated fragment of a hard-wrapped sentence ("of the results"), is content and stays.
    const repeated = (counts.get(repeatKey(l.text)) ?? 0) >= 3 && l.text.length <= 120 && !/^\p{Ll}/u.test(l.text);
    return !(repeated && (l.text.includes(' ') || l.text.length >= 12));
  });

  // 3. Re-join hard-wrapped lines, and keep at most one blank line between paragraphs.
  const out: Line[] = [];
  for (const l of kept) {
    const prev = out[out.length - 1];
    if (!l.text && !l.code) {
      if (prev && prev.text) out.push(l);
      continue;
    }
    if (prev && prev.text && !prev.code && !l.code && wrappedInto(prev.text, l.text)) {
      prev.text = prev.text.endsWith('-') && /\p{L}-$/u.test(prev.text) ? prev.text + l.text : `${prev.text} ${l.text}`;
      continue;
    }
    out.push({ ...l });
  }
  while (out.length && !out[out.length - 1]!.text) out.pop();
  return out.map((l) => l.text).join('\n');
}

/** Whether `next` continues the sentence that `prev` was cut off in. */
function wrappedInto(prev: string, next: string): boolean {
  if (endsSentence(prev) || isStructural(next) || /^#{1,6}\s/u.test(prev) || prev.includes('|')) return false;
  if (/^[\p{Ll}]/u.test(next)) return true; // continues in lower case
  if (/[,\-–(]$/u.test(prev) && /^[\p{L}\p{N}"“‘(]/u.test(next)) return true; // cut after a comma or dash
  return false;
}

// ---------------------------------------------------------------------------------------------
// Extractive answering
// ---------------------------------------------------------------------------------------------

const STOP_WORDS = englishStopWordsAnd(
  'could would also may might must shall us tell please know explain describe give show get got let like want need find say says said ' +
    'one use used using via per yes',
);

/** Content terms of a text: lower-cased words and numbers without stop words, lightly stemmed. */
export function contentTerms(text: string): string[] {
  const words = text.normalize('NFKC').toLowerCase().match(/[\p{L}\p{N}]+(?:['’][\p{L}]+)?/gu) ?? [];
  const terms: string[] = [];
  for (let w of words) {
    w = w.replace(/['’]s$/u, '');
    if (STOP_WORDS.has(w) || (w.length < 2 && !/\d/u.test(w))) continue;
    terms.push(stem(w));
  }
  return terms;
}

function stem(w: string): string {
  if (w.length > 4 && w.endsWith('ies')) return `${w.slice(0, -3)}y`;
  if (w.length > 5 && w.endsWith('ing')) return w.slice(0, -3);
  if (w.length > 4 && w.endsWith('ed')) return w.slice(0, -2);
  if (w.length > 3 && w.endsWith('s') && !w.endsWith('ss') && !w.endsWith('us') && !w.endsWith('is')) return w.slice(0, -1);
  return w;
}

function splitSentences(text: string): string[] {
  return text
    .split(/\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)])\s)|(?<=[.!?…][)"”’»]?)\s+(?=[\p{Lu}\p{N}"“‘([])/u)
    .map((s) => s.replace(/\s+/gu, ' ').trim())
    .filter((s) => /[\p{L}\p{N}]/u.test(s));
}

interface Candidate { sentence: string; passage: number; order: number; score: number }

/** Said under every composed answer: the local model quotes, it does not generate. */
export const LOCAL_MODEL_NOTE = '(Answered by the local extractive model: the sentences above are quoted from your documents, not generated.)';

export const NOTHING_FOUND =
  'I could not find anything relevant to your question in your documents, so I cannot answer it from them.';

/** Maximum number of sentences an extractive answer quotes. */
const MAX_SENTENCES = 5;

/**
 * Composes an answer from the passages' sentences that share the most (IDF-weighted) terms with the
 * question. Each sentence is followed by the number of its passage; the sources are listed at the end.
 * The answer fits in `maxTokens` when given (sentences that do not fit are left out).
 */
export function extractiveAnswer(question: string, passages: readonly ContextPassage[], maxTokens?: number): string {
  const queryTerms = new Set(contentTerms(question));
  if (queryTerms.size === 0 || passages.length === 0) return NOTHING_FOUND;

  const candidates: Candidate[] = [];
  const sentenceTerms: Set<string>[] = [];
  passages.forEach((p, passage) => {
    for (const sentence of splitSentences(p.text)) {
      candidates.push({ sentence, passage, order: candidates.length, score: 0 });
      sentenceTerms.push(new Set(contentTerms(sentence)));
    }
  });
  const df = new Map<string, number>();
  for (const terms of sentenceTerms) for (const t of terms) if (queryTerms.has(t)) df.set(t, (df.get(t) ?? 0) + 1);
  candidates.forEach((c, i) => {
    for (const t of sentenceTerms[i]!) if (queryTerms.has(t)) c.score += Math.log(1 + candidates.length / df.get(t)!);
  });

  const ranked = candidates.filter((c) => c.score > 0).sort((a, b) => b.score - a.score || a.order - b.order);
  if (ranked.length === 0) return NOTHING_FOUND;

  const seen = new Set<string>();
  let chosen: Candidate[] = [];
  for (const c of ranked) {
    const key = c.sentence.toLowerCase();
    if (seen.has(key)) continue;
    let attempt = [...chosen, c];
    if (maxTokens !== undefined && countTextTokens(compose(attempt, passages)) > maxTokens) {
      if (chosen.length > 0) continue;
      // Not even the best sentence fits: quote as much of it as the budget leaves room for.
      const room = maxTokens - countTextTokens(compose([{ ...c, sentence: '…' }], passages));
      if (room < 8) return truncateToTokens(compose(attempt, passages), maxTokens);
      attempt = [{ ...c, sentence: `${truncateToTokens(c.sentence, room - 1)}…` }];
    }
    seen.add(key);
    chosen = attempt;
    if (chosen.length >= MAX_SENTENCES) break;
  }
  return compose(chosen, passages);
}

function compose(chosen: Candidate[], passages: readonly ContextPassage[]): string {
  // Quote in document order; number the passages in the order they are first quoted.
  const inOrder = [...chosen].sort((a, b) => a.order - b.order);
  const numbers = new Map<number, number>();
  for (const c of inOrder) if (!numbers.has(c.passage)) numbers.set(c.passage, numbers.size + 1);
  const body = inOrder.map((c) => `${c.sentence} [${numbers.get(c.passage)}]`).join(' ');
  const sources = [...numbers].map(([passage, n]) => `[${n}] ${passages[passage]?.source?.trim() || `passage ${passage + 1}`}`);
  return `Based on your documents: ${body}\n\nSources:\n${sources.join('\n')}\n\n${LOCAL_MODEL_NOTE}`;
}
