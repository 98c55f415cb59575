import { foldWord, singular, STOP_WORDS } from './graph.js';

export const CONFIDENTIAL_SNIPPET = '[confidential]';
/** Target length of a snippet (spec: about 200 characters); never more than MAX_SNIPPET. */
export const SNIPPET_TARGET = 200;
export const MAX_SNIPPET = 400;

/** A word: what wordSpans finds (queryTerms reads the query's words with it). */
export const WORD_RE = /[\p{L}\p{N}](?:[\p{L}\p{N}'’-]*[\p{L}\p{N}])?/gu;

/** A word of ASCII letters and digits alone, which foldWord only lower-cases. */
const PLAIN_WORD = /^[A-Za-z0-9]+$/;
/**
 * Comparable form of a word: folded, singular, cut to 6 characters (a cheap stand-in for the stemmer). A plain
 * ASCII word skips foldWord's normalisation and replacements, which change nothing in it and cost most of the
 * snippets' time (about 1,500 words for the 10 snippets of a page of results).
 */
const key = (w: string) => singular(PLAIN_WORD.test(w) ? w.toLowerCase() : foldWord(w)).slice(0, 6);

export function queryTerms(query: string): Set<string> {
  const terms = new Set<string>();
  for (const m of query.matchAll(WORD_RE)) {
    const w = foldWord(m[0]);
    if (w.length >= 2 && !STOP_WORDS.has(w)) terms.add(key(w));
  }
  return terms;
}

/**
 * About SNIPPET_TARGET characters of `text` around the densest cluster of query terms: the window of
 * that width holding the most matched words (ties: the earliest), widened evenly to the target, cut on
 * word boundaries, with an ellipsis where text was cut. Linear in the text.
 */
export function makeSnippet(text: string, terms: Set<string>, target = SNIPPET_TARGET): string {
  const clean = text.replace(/\s+/gu, ' ').trim();
  if (clean.length <= target) return clean;
  const spans = wordSpans(clean);
  const count = spans.length >> 1;
  const start = (w: number) => spans[2 * w]!;
  const end = (w: number) => spans[2 * w + 1]!;
  // the words matching a query term, by index
  const hits: number[] = [];
  for (let w = 0; w < count; w++) if (terms.has(key(clean.slice(start(w), end(w))))) hits.push(w);
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
  if (cp < 128) return (cp >= 48 && cp <= 57) || (cp >= 65 && cp <= 90) || (cp >= 97 && cp <= 122);
  return LETTER_OR_DIGIT.test(String.fromCodePoint(cp));
}

/**
 * The words of `text` as WORD_RE finds them, as [start, end) pairs of UTF-16 offsets: a letter or digit, then
 * letters, digits, apostrophes and hyphens, ending on a letter or digit. A scan instead of `matchAll`, which
 * made an array for each of the ~1,500 words of a page of snippets (test/search.test.ts compares the two).
 */
export function wordSpans(text: string): number[] {
  const spans: number[] = [];
  const n = text.length;
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
    spans.push(from, last);
    i = last;
  }
  return spans;
}
