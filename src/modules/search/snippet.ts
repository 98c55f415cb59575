import { foldWord, singular, STOP_WORDS } from './graph.js';

export const CONFIDENTIAL_SNIPPET = '[confidential]';
/** Target length of a snippet (spec: about 200 characters); never more than MAX_SNIPPET. */
export const SNIPPET_TARGET = 200;
export const MAX_SNIPPET = 400;

/** A word: what wordSpans finds (queryTerms reads the query's words with it). */
export const WORD_RE = /[\p{L}\p{N}](?:[\p{L}\p{N}'’-]*[\p{L}\p{N}])?/gu;

/**
 * Comparable form of a word: folded, singular, cut to 6 characters (a cheap stand-in for the stemmer). A plain
 * ASCII word skips foldWord's normalisation and replacements, which change nothing in it and cost most of the
 * snippets' time (about 1,500 words for the 10 snippets of a page of results).
 */
const key = (w: string) => singular(isPlain(w, 0, w.length) ? w.toLowerCase() : foldWord(w)).slice(0, 6);

export function queryTerms(query: string): Set<string> {
  const terms = new Set<string>();
  for (const m of query.matchAll(WORD_RE)) {
    const w = foldWord(m[0]);
    if (w.length >= 2 && !STOP_WORDS.has(w)) terms.add(key(w));
  }
  return terms;
}

/** An ASCII letter or digit. */
const isAsciiLetterOrDigit = (c: number) => (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122);

/** Whether text[from, to) is a plain word: ASCII letters and digits alone, which foldWord only lower-cases. */
function isPlain(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!isAsciiLetterOrDigit(text.charCodeAt(i))) return false;
  return true;
}

const lowerAscii = (c: number) => (c >= 65 && c <= 90 ? c + 32 : c);

/**
 * The first two characters of a query's terms, as a bitmap over ASCII pairs. A plain word's comparable form
 * begins with its own first two characters lower-cased (`singular` keeps at least the first two of a word of
 * two or more), and every term has two or more: a plain word whose first two are no term's cannot match, and
 * is passed over without being cut out and folded (most of a page's ~1,500 words).
 */
const termPrefixes = new WeakMap<ReadonlySet<string>, Uint8Array>();
function prefixesOf(terms: ReadonlySet<string>): Uint8Array {
  let bits = termPrefixes.get(terms);
  if (!bits) {
    bits = new Uint8Array(128 * 128);
    for (const t of terms) {
      const a = t.charCodeAt(0);
      const b = t.charCodeAt(1);
      if (a < 128 && b < 128) bits[a * 128 + b] = 1;
    }
    termPrefixes.set(terms, bits);
  }
  return bits;
}

/**
 * About SNIPPET_TARGET characters of `text` around the densest cluster of query terms: the window of
 * that width holding the most matched words (ties: the earliest), widened evenly to the target, cut on
 * word boundaries, with an ellipsis where text was cut. Linear in the text.
 */
export function makeSnippet(text: string, terms: Set<string>, target = SNIPPET_TARGET): string {
  const clean = text.replace(/\s+/gu, ' ').trim();
  if (clean.length <= target) return clean;
  const count = scanWords(clean);
  const spans = scratch;
  const start = (w: number) => spans[2 * w]!;
  const end = (w: number) => spans[2 * w + 1]!;
  // the words matching a query term, by index
  const prefixes = prefixesOf(terms);
  const hits: number[] = [];
  for (let w = 0; w < count; w++) {
    const a = start(w);
    const b = end(w);
    if (isPlain(clean, a, b) && (b - a < 2 || prefixes[lowerAscii(clean.charCodeAt(a)) * 128 + lowerAscii(clean.charCodeAt(a + 1))] === 0)) continue;
    if (terms.has(key(clean.slice(a, b)))) hits.push(w);
  }
  let from = 0;
  if (hits.length > 0) {
    let best = 0;
    let bestCount = 0;
    let j = 0;
    for (let i = 0; i < hits.length; i++) {
      if (j < i) j = i;
      while (j + 1 < hits.length && end(hits[j + 1]!) - start(hits[i]!) <= target) j++;
      const n = j - i + 1;
      if (n > bestCount) {
        bestCount = n;
        best = i;
      }
    }
    const clusterStart = start(hits[best]!);
    let clusterEnd = end(hits[best]!);
    for (let k = best; k < hits.length && end(hits[k]!) - clusterStart <= target; k++) clusterEnd = end(hits[k]!);
    from = Math.max(0, Math.round(clusterStart - (target - (clusterEnd - clusterStart)) / 2));
  }
  from = Math.min(from, Math.max(0, clean.length - target));
  let to = Math.min(clean.length, from + target);
  const window = { from, to };
  // cut on word boundaries: move the start to the next word start, the end back to a word end
  if (from > 0) {
    for (let w = 0; w < count; w++) {
      if (start(w) >= from) {
        from = start(w);
        break;
      }
    }
  }
  if (to < clean.length) {
    let last = from;
    for (let w = 0; w < count; w++) if (end(w) <= to && end(w) > last) last = end(w);
    to = last > from ? last : to;
  }
  // no whole word fits in the window (the matched word is longer than it, a DNA sequence, a run of one
  // letter): cut inside the word instead
  if (to <= from) ({ from, to } = window);
  const body = clean.slice(from, to).trim();
  return `${from > 0 ? '… ' : ''}${body}${to < clean.length ? ' …' : ''}`.slice(0, MAX_SNIPPET);
}

const LETTER_OR_DIGIT = /^[\p{L}\p{N}]$/u;
/** Whether a code point is a letter or a digit (\p{L} or \p{N}); ASCII without a regular expression. */
function isLetterOrDigit(cp: number): boolean {
  if (cp < 128) return isAsciiLetterOrDigit(cp);
  return LETTER_OR_DIGIT.test(String.fromCodePoint(cp));
}

/** [start, end) pairs of the last scanWords, at [2w, 2w + 1] (grown as needed; makeSnippet is synchronous) */
let scratch = new Int32Array(4096);

/**
 * The words of `text` as WORD_RE finds them, as [start, end) pairs of UTF-16 offsets: a letter or digit, then
 * letters, digits, apostrophes and hyphens, ending on a letter or digit. A scan instead of `matchAll`, which
 * made an array for each of the ~1,500 words of a page of snippets (test/search.test.ts compares the two).
 */
export function wordSpans(text: string): number[] {
  return Array.from(scratch.subarray(0, 2 * scanWords(text)));
}

/** Scans the words of `text` into `scratch`; returns how many. */
function scanWords(text: string): number {
  const n = text.length;
  let count = 0;
  let i = 0;
  while (i < n) {
    const cp = text.codePointAt(i)!;
    const width = cp > 0xffff ? 2 : 1;
    if (!isLetterOrDigit(cp)) {
      i += width;
      continue;
    }
    const from = i;
    let last = i + width;
    let j = last;
    while (j < n) {
      const c = text.codePointAt(j)!;
      const w = c > 0xffff ? 2 : 1;
      if (isLetterOrDigit(c)) last = j + w;
      else if (c !== 39 /* ' */ && c !== 0x2019 /* ’ */ && c !== 45 /* - */) break;
      j += w;
    }
    if (2 * count + 2 > scratch.length) {
      const grown = new Int32Array(scratch.length * 2);
      grown.set(scratch);
      scratch = grown;
    }
    scratch[2 * count] = from;
    scratch[2 * count + 1] = last;
    count++;
    i = last;
  }
  return count;
}
