import { foldWord, singular, STOP_WORDS } from './graph.js';

export const CONFIDENTIAL_SNIPPET = '[confidential]';
/** Target length of a snippet (spec: about 200 characters); never more than MAX_SNIPPET. */
export const SNIPPET_TARGET = 200;
export const MAX_SNIPPET = 400;

const WORD_RE = /[\p{L}\p{N}](?:[\p{L}\p{N}'’-]*[\p{L}\p{N}])?/gu;

/** Comparable form of a word: folded, singular, cut to 6 characters (a cheap stand-in for the stemmer). */
const key = (w: string) => singular(foldWord(w)).slice(0, 6);

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
  const words = [...clean.matchAll(WORD_RE)].map((m) => ({ start: m.index, end: m.index + m[0].length, hit: terms.has(key(m[0])) }));
  const hits = words.filter((w) => w.hit);
  let from = 0;
  if (hits.length > 0) {
    let best = 0;
    let bestCount = 0;
    let j = 0;
    for (let i = 0; i < hits.length; i++) {
      if (j < i) j = i;
      while (j + 1 < hits.length && hits[j + 1]!.end - hits[i]!.start <= target) j++;
      const count = j - i + 1;
      if (count > bestCount) {
        bestCount = count;
        best = i;
      }
    }
    const clusterStart = hits[best]!.start;
    let clusterEnd = hits[best]!.end;
    for (let k = best; k < hits.length && hits[k]!.end - clusterStart <= target; k++) clusterEnd = hits[k]!.end;
    from = Math.max(0, Math.round(clusterStart - (target - (clusterEnd - clusterStart)) / 2));
  }
  from = Math.min(from, Math.max(0, clean.length - target));
  let to = Math.min(clean.length, from + target);
  const window = { from, to };
  // cut on word boundaries: move the start to the next word start, the end back to a word end
  if (from > 0) {
    const next = words.find((w) => w.start >= from);
    if (next) from = next.start;
  }
  if (to < clean.length) {
    let last = from;
    for (const w of words) if (w.end <= to && w.end > last) last = w.end;
    to = last > from ? last : to;
  }
  // no whole word fits in the window (the matched word is longer than it, a DNA sequence, a run of one
  // letter): cut inside the word instead
  if (to <= from) ({ from, to } = window);
  const body = clean.slice(from, to).trim();
  return `${from > 0 ? '… ' : ''}${body}${to < clean.length ? ' …' : ''}`.slice(0, MAX_SNIPPET);
}
