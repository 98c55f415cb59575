/**
 * Splits extracted text into chunks for embedding and retrieval.
 *
 * Structure first:
 * 1. sections: a markdown heading (`# Title`, setext `Title\n===`) or a heading-like line starts a
 *    section (heading-like: a short stand-alone line without closing punctuation that is numbered
 *    ("2.1 Scope"), starts with Chapter/Section/Part/Appendix, is in CAPITALS or in Title Case;
 *    inside a paragraph, as in PDF text, only the numbered/keyword/CAPITALS forms count, and only
 *    after a line that ended a sentence). Lines inside ``` fences are never headings.
 * 2. paragraphs (blank lines), then lines, then sentences; a sentence longer than `maxTokens` is cut
 *    into word windows (and a single over-long "word", e.g. base64, into character windows).
 * 3. units are packed greedily into chunks of at most `maxTokens` tokens. A section always starts a
 *    new chunk, except that a chunk holding only heading lines is continued (so `# Title` followed
 *    by `## Intro` does not make a chunk of its own). `heading` is the heading of the chunk's section.
 * 4. consecutive chunks of the same section overlap: the next chunk starts with the trailing units
 *    of the previous one that fit in `overlapTokens` (or, when the last unit alone is larger, its
 *    trailing words). There is no overlap across a section boundary.
 *
 * Tokens are o200k_base (gpt-4o family) tokens. Every unit is counted once and counts are summed
 * (a separator counts as one token, an upper bound); each finished chunk is counted once more, exactly,
 * and that count is `tokens`. A chunk never exceeds `maxTokens`.
 */
import { o200k } from '../../../providers/llm/tokens.js';

export interface Chunk {
  index: number;
  text: string;
  tokens: number;
  heading?: string;
}

export interface ChunkOptions {
  /** Upper bound of tokens per chunk; 400 by default. */
  maxTokens?: number;
  /** Approximate tokens repeated from the end of a chunk at the start of the next; 60 by default. */
  overlapTokens?: number;
}

// Special-token strings such as "<|endoftext|>" in a document are ordinary text.
const ENCODE_OPTIONS = { disallowedSpecial: new Set<string>() };

/**
 * The BPE merge is quadratic in the length of one pre-tokenised piece, and a piece can be a whole
 * run of non-space characters (CJK text, base64, "=====" rules). Runs longer than this are counted
 * in slices, which can over-count by about one token per slice and keeps counting linear.
 */
const MAX_RUN = 64;
const LONG_RUN = new RegExp(`(?<!\\S)\\S{${MAX_RUN + 1},}`, 'g'); // the look-behind: only try at the start of a run

function sliceEnd(s: string, start: number, wanted: number): number {
  let end = Math.min(start + wanted, s.length);
  if (end < s.length && end > start + 1) {
    const code = s.charCodeAt(end - 1);
    if (code >= 0xd800 && code <= 0xdbff) end--; // do not split a surrogate pair
  }
  return end;
}

/** Number of o200k_base tokens of `text`. */
export function countTokens(text: string): number {
  if (!text) return 0;
  const countO200k = o200k().countTokens;
  if (text.length <= MAX_RUN) return countO200k(text, ENCODE_OPTIONS);
  LONG_RUN.lastIndex = 0;
  let match = LONG_RUN.exec(text);
  if (!match) return countO200k(text, ENCODE_OPTIONS);
  let total = 0;
  let last = 0;
  while (match) {
    if (match.index > last) total += countO200k(text.slice(last, match.index), ENCODE_OPTIONS);
    const run = match[0];
    for (let i = 0; i < run.length; ) {
      const end = sliceEnd(run, i, MAX_RUN);
      total += countO200k(run.slice(i, end), ENCODE_OPTIONS);
      i = end;
    }
    last = match.index + run.length;
    match = LONG_RUN.exec(text);
  }
  if (last < text.length) total += countO200k(text.slice(last), ENCODE_OPTIONS);
  return total;
}

// ---------------------------------------------------------------------------------------------
// Units

type Sep = '\n\n' | '\n' | ' ';

interface Unit {
  text: string;
  tokens: number;
  /** Separator placed before this unit when it is not the first of its chunk. */
  sep: Sep;
  section: number;
  heading: string | undefined;
  isHeading: boolean;
}

const SEP_TOKENS = 1;

const MD_HEADING = /^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$/;
const SETEXT_UNDERLINE = /^ {0,3}(=+|-+)[ \t]*$/;
const FENCE = /^ {0,3}(```|~~~)/;
const CLOSING_PUNCTUATION = /[.,;:!?…]$/;
const SENTENCE_END = /[.!?…:。！？]["'”’)\]]*$/;
const NUMBERED = /^(\d{1,3}(\.\d{1,3})*\.?|[IVXLC]{1,6}\.|[A-Z]\.)\s+\p{Lu}/u;
const MULTI_LEVEL_NUMBERED = /^\d{1,3}(\.\d{1,3})+\.?\s+\p{Lu}/u;
const KEYWORD = /^(chapter|section|part|appendix|annex)\s+[\dIVXLC]/i;

function isCapitals(t: string): boolean {
  const letters = t.replace(/[^\p{L}]/gu, '');
  return letters.length >= 3 && letters === letters.toUpperCase() && letters !== letters.toLowerCase();
}

function shortHeadingCandidate(t: string): boolean {
  return t.length >= 2 && t.length <= 80 && !CLOSING_PUNCTUATION.test(t) && /\p{L}/u.test(t) && t.split(/\s+/).length <= 10;
}

/** A heading-like line standing alone as a paragraph. */
function looksLikeStandaloneHeading(line: string): boolean {
  const t = line.trim();
  if (!shortHeadingCandidate(t)) return false;
  if (NUMBERED.test(t) || KEYWORD.test(t) || isCapitals(t)) return true;
  const significant = t.split(/\s+/).filter((w) => /^[\p{L}]{4,}/u.test(w));
  return significant.length > 0 && significant.every((w) => /^\p{Lu}/u.test(w)) && /^\p{Lu}/u.test(t);
}

/** A heading-like line inside a paragraph (PDF text has no blank lines around headings). */
function looksLikeInlineHeading(line: string): boolean {
  const t = line.trim();
  return shortHeadingCandidate(t) && (MULTI_LEVEL_NUMBERED.test(t) || KEYWORD.test(t) || isCapitals(t));
}

function headingText(s: string): string {
  return s.replace(/\s+/g, ' ').trim().slice(0, 200);
}

// Split after sentence punctuation (and closing quotes/brackets) followed by whitespace,
// or right after CJK full stops.
const SENTENCE_SPLIT = /(?<=[.!?…]["'”’)\]]*)\s+(?=\S)|(?<=[。！？])(?=\S)/u;

interface Builder {
  units: Unit[];
  section: number;
  heading: string | undefined;
  maxTokens: number;
}

function addHeading(b: Builder, line: string, heading: string): void {
  b.section++;
  b.heading = headingText(heading);
  const text = line.trim();
  addPiece(b, text, '\n\n', true);
}

function addPiece(b: Builder, text: string, sep: Sep, isHeading = false): void {
  const tokens = countTokens(text);
  if (tokens <= b.maxTokens) {
    b.units.push({ text, tokens, sep, section: b.section, heading: b.heading, isHeading });
    return;
  }
  // over-long sentence: word windows
  let first = true;
  for (const piece of windows(text, b.maxTokens - SEP_TOKENS)) {
    b.units.push({ text: piece.text, tokens: piece.tokens, sep: first ? sep : ' ', section: b.section, heading: b.heading, isHeading });
    first = false;
  }
}

/** Cuts text into pieces of at most `budget` tokens at spaces; words longer than that are cut by characters. */
function windows(text: string, budget: number): Array<{ text: string; tokens: number }> {
  const out: Array<{ text: string; tokens: number }> = [];
  let words: string[] = [];
  let sum = 0;
  const flush = () => {
    if (!words.length) return;
    const joined = words.join(' ');
    let tokens = countTokens(joined);
    // the per-word sum is an estimate: shed words until the exact count fits
    while (tokens > budget && words.length > 1) {
      const last = words.pop()!;
      const rest = words.join(' ');
      out.push(...windowsOfFitted(rest, budget));
      words = [last];
      tokens = countTokens(last);
      sum = tokens;
      if (tokens <= budget) {
        out.push({ text: last, tokens });
        words = [];
        sum = 0;
        return;
      }
    }
    if (tokens > budget) out.push(...characterWindows(words.join(' '), budget));
    else out.push({ text: joined, tokens });
    words = [];
    sum = 0;
  };
  for (const word of text.split(/\s+/)) {
    if (!word) continue;
    const t = countTokens(word) + SEP_TOKENS;
    if (t > budget) {
      flush();
      out.push(...characterWindows(word, budget));
      continue;
    }
    if (sum + t > budget) flush();
    words.push(word);
    sum += t;
  }
  flush();
  return out;
}

function windowsOfFitted(text: string, budget: number): Array<{ text: string; tokens: number }> {
  const tokens = countTokens(text);
  return tokens <= budget ? [{ text, tokens }] : characterWindows(text, budget);
}

/** Cuts text into slices of at most `budget` tokens, never inside a surrogate pair. */
function characterWindows(text: string, budget: number): Array<{ text: string; tokens: number }> {
  const out: Array<{ text: string; tokens: number }> = [];
  let guess = Math.max(1, budget * 3);
  let pos = 0;
  while (pos < text.length) {
    let end = sliceEnd(text, pos, guess);
    let piece = text.slice(pos, end);
    let tokens = countTokens(piece);
    while (tokens > budget && end - pos > 1) {
      guess = Math.max(1, Math.floor(((end - pos) * budget) / tokens * 0.9));
      end = sliceEnd(text, pos, guess);
      piece = text.slice(pos, end);
      tokens = countTokens(piece);
    }
    out.push({ text: piece, tokens });
    pos = end;
  }
  return out;
}

function addParagraph(b: Builder, lines: string[]): void {
  let firstLine = true;
  for (const line of lines) {
    const sentences = line.split(SENTENCE_SPLIT);
    let first = true;
    for (const sentence of sentences) {
      if (!sentence.trim()) continue;
      addPiece(b, first ? sentence : sentence.trim(), first ? (firstLine ? '\n\n' : '\n') : ' ');
      first = false;
    }
    if (!first) firstLine = false;
  }
}

function flushParagraph(b: Builder, lines: string[]): void {
  if (!lines.length) return;
  if (lines.length === 1 && looksLikeStandaloneHeading(lines[0]!)) {
    addHeading(b, lines[0]!, lines[0]!);
    return;
  }
  if (lines.length === 2 && SETEXT_UNDERLINE.test(lines[1]!) && lines[0]!.trim()) {
    addHeading(b, lines[0]!, lines[0]!);
    return;
  }
  // heading-like lines inside the paragraph start a section of their own
  let start = 0;
  for (let i = 1; i < lines.length; i++) {
    const prev = lines[i - 1]!.trim();
    if (SENTENCE_END.test(prev) && i < lines.length - 1 && looksLikeInlineHeading(lines[i]!)) {
      if (i > start) addParagraph(b, lines.slice(start, i));
      addHeading(b, lines[i]!, lines[i]!);
      start = i + 1;
    }
  }
  if (start < lines.length) addParagraph(b, lines.slice(start));
}

function toUnits(text: string, maxTokens: number): Unit[] {
  const b: Builder = { units: [], section: 0, heading: undefined, maxTokens };
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  let paragraph: string[] = [];
  let inFence = false;
  for (const raw of lines) {
    const line = raw.trimEnd();
    if (FENCE.test(line)) {
      inFence = !inFence;
      paragraph.push(line);
      continue;
    }
    if (inFence) {
      if (line) paragraph.push(line);
      continue;
    }
    if (!line.trim()) {
      flushParagraph(b, paragraph);
      paragraph = [];
      continue;
    }
    const md = MD_HEADING.exec(line);
    if (md) {
      flushParagraph(b, paragraph);
      paragraph = [];
      addHeading(b, line, md[2]!);
      continue;
    }
    paragraph.push(line);
  }
  flushParagraph(b, paragraph);
  return b.units;
}

// ---------------------------------------------------------------------------------------------
// Packing

function joinUnits(units: readonly Unit[]): string {
  let text = '';
  for (let i = 0; i < units.length; i++) text += i === 0 ? units[i]!.text : units[i]!.sep + units[i]!.text;
  return text;
}

/** Trailing units (or trailing words of the last unit) of a chunk, within `budget` tokens. */
function overlapOf(units: readonly Unit[], budget: number): Unit[] {
  if (budget <= 0) return [];
  const carried: Unit[] = [];
  let sum = 0;
  for (let i = units.length - 1; i >= 0; i--) {
    const u = units[i]!;
    if (u.isHeading) break;
    const cost = u.tokens + (carried.length ? SEP_TOKENS : 0);
    if (sum + cost > budget) break;
    carried.unshift(u);
    sum += cost;
  }
  if (carried.length) return carried;
  const last = units[units.length - 1];
  if (!last || last.isHeading) return [];
  const words = last.text.trim().split(/\s+/);
  const tail: string[] = [];
  sum = 0;
  for (let i = words.length - 1; i > 0; i--) {
    const cost = countTokens(words[i]!) + SEP_TOKENS;
    if (sum + cost > budget) break;
    tail.unshift(words[i]!);
    sum += cost;
  }
  if (!tail.length) return [];
  const text = tail.join(' ');
  const tokens = countTokens(text);
  if (tokens > budget) return [];
  return [{ ...last, text, tokens }];
}

export function chunkText(text: string, options: ChunkOptions = {}): Chunk[] {
  const maxTokens = Math.max(8, Math.floor(options.maxTokens ?? 400));
  const overlapTokens = Math.max(0, Math.min(Math.floor(options.overlapTokens ?? 60), Math.floor(maxTokens / 2)));
  const units = toUnits(text, maxTokens);
  const chunks: Chunk[] = [];

  /**
   * Writes the chunk made of `list` (whose first `carried` units repeat the previous chunk).
   * The exact token count decides: while it is over the limit, overlap units are dropped first,
   * then trailing units are given back to be packed again. Returns the units written and how
   * many were given back.
   */
  const emit = (list: Unit[], carried: number): { written: Unit[]; givenBack: number } => {
    let givenBack = 0;
    for (;;) {
      if (list.length <= carried) return { written: [], givenBack };
      const chunkText = joinUnits(list);
      const tokens = countTokens(chunkText);
      if (tokens <= maxTokens || list.length === 1) {
        const heading = list[list.length - 1]!.heading;
        const index = chunks.length;
        chunks.push(heading === undefined ? { index, text: chunkText, tokens } : { index, text: chunkText, tokens, heading });
        return { written: list, givenBack };
      }
      if (carried > 0) {
        list = list.slice(1);
        carried--;
      } else {
        list = list.slice(0, -1);
        givenBack++;
      }
    }
  };
  const sumOf = (list: readonly Unit[]): number => list.reduce((s, u, k) => s + u.tokens + (k ? SEP_TOKENS : 0), 0);

  let cur: Unit[] = [];
  let carried = 0; // the first `carried` units of `cur` repeat the end of the previous chunk
  let sum = 0;
  let onlyHeadings = true;

  let i = 0;
  while (i < units.length) {
    const unit = units[i]!;
    if (!cur.length) {
      cur = [unit];
      sum = unit.tokens;
      onlyHeadings = unit.isHeading;
      i++;
      continue;
    }
    const last = cur[cur.length - 1]!;
    if (unit.section !== last.section && !onlyHeadings) {
      // a section starts a new chunk, without overlap
      const { givenBack } = emit(cur, carried);
      i -= givenBack;
      cur = [];
      carried = 0;
      continue;
    }
    if (sum + SEP_TOKENS + unit.tokens <= maxTokens) {
      cur.push(unit);
      sum += SEP_TOKENS + unit.tokens;
      onlyHeadings &&= unit.isHeading;
      i++;
      continue;
    }
    if (cur.length === carried) {
      // only overlap so far and the unit does not fit beside it: shorten the overlap
      cur = cur.slice(1);
      carried--;
      sum = sumOf(cur);
      continue;
    }
    const { written, givenBack } = emit(cur, carried);
    i -= givenBack;
    const next = units[i]!;
    cur = written.length && next.section === written[written.length - 1]!.section ? overlapOf(written, overlapTokens) : [];
    carried = cur.length;
    sum = sumOf(cur);
    onlyHeadings = cur.every((u) => u.isHeading);
  }
  emit(cur, carried);
  return chunks;
}
