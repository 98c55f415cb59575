/**
 * Knowledge-graph entity extraction (KAG side), pure and cheap: one linear pass of regular expressions
 * without backtracking hazards over a bounded text (a chunk is a few hundred tokens; longer input is cut
 * at MAX_TEXT). No model, no dictionary beyond a stop-word list: it runs in well under a millisecond per
 * chunk, so ingestion can call it inline (it yields to the event loop between batches).
 *
 * Entities, each normalised (lower case, singular, punctuation folded):
 * - `name`: runs of capitalised words not at a sentence start ("Navier-Stokes", "Ada Lovelace"), and a
 *   capitalised single word elsewhere than at a sentence start;
 * - `acronym`: 2..10 capitals/digits with at least two capitals ("NASA", "HNSW", "GPT4"), a plural s folded;
 * - `quantity`: a number with a unit ("10 km", "3.5 %", "200 psi");
 * - `phrase`: key noun phrases approximated as adjacent content words (bigrams within a clause), e.g.
 *   "boundary layer" from "boundary layers" (no tagger: stop words and punctuation split clauses).
 */
import { englishStopWordsAnd } from '../../shared/stop-words.js';

export type EntityKind = 'name' | 'acronym' | 'quantity' | 'phrase';

export interface Mention {
  name: string;
  kind: EntityKind;
  /** occurrences in the text */
  tf: number;
  /** 1 = most salient; edges are built from the first EDGE_RANK mentions of a chunk */
  rank: number;
}

const MAX_TEXT = 20_000;
/** At most this many entities per chunk are stored (the most salient). */
export const MAX_MENTIONS_PER_CHUNK = 48;
/** Co-occurrence edges link the first EDGE_RANK entities of a chunk (keeps edges linear in chunks). */
export const EDGE_RANK = 8;

/** Not entities: the Snowball stop words and the words of scientific and report prose that name nothing. */
export const STOP_WORDS = englishStopWordsAnd(
  'also could done either else etc however least less let like made make many may might much must neither often one ought per perhaps ' +
    'rather shall since therefore though thus upon us use used using via whatever whether whose within without would yet ' +
    'anything something nothing everything obtained given found shown show shows presented present paper study studied studies investigated ' +
    'investigation results result method methods approach problem problems case cases data number numbers new several various two three ' +
    'first second certain available relevant discussed described considered known possible particular general based basis type types',
);

const UNITS = new Set(
  (
    '% percent pct km m cm mm nm µm um mi ft in yd kg g mg lb lbs oz t s ms µs ns min h hr hrs hz khz mhz ghz b kb mb gb tb kib mib gib ' +
    'w kw mw gw kwh mwh v kv mv a ma n kn pa kpa mpa gpa psi psf bar atm k °c °f c f deg degree rpm db l ml cc mph kph knot mach ' +
    'year yr day week month hour minute second eur usd gbp chf $ € £'
  ).split(/\s+/),
);

/** Singular form of a lower-case word (plural folding for phrases and acronyms; never applied to names). */
export function singular(word: string): string {
  if (word.length <= 3) return word;
  if (word.endsWith('ies') && word.length > 4) return `${word.slice(0, -3)}y`;
  if (word.endsWith('sses') || word.endsWith('shes') || word.endsWith('ches') || word.endsWith('xes')) return word.slice(0, -2);
  if (word.endsWith('ss') || word.endsWith('us') || word.endsWith('is') || word.endsWith('ous')) return word;
  if (word.endsWith('s')) return word.slice(0, -1);
  return word;
}

/** Case and punctuation folding of one word: lower case, inner hyphens and apostrophes kept as one form. */
export function foldWord(word: string): string {
  return word
    .toLowerCase()
    .normalize('NFKC')
    .replace(/['’]s$/u, '')
    .replace(/['’]/gu, '')
    .replace(/[‐‑‒–—]/gu, '-');
}

const WORD_RE = /[\p{L}\p{N}](?:[\p{L}\p{N}'’-]*[\p{L}\p{N}])?/gu;
/** Clause boundaries: sentence punctuation, brackets, quotes, commas, line breaks. */
const CLAUSE_RE = /[.;:!?()[\]{}"“”,\n\r\t|]+|\s-\s/u;
const QUANTITY_RE = /(?<![\p{L}\p{N}.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?\s?(%|°[cCfF]|[$€£]|[\p{L}µ°]{1,7})(?![\p{L}\p{N}])/gu;
const ACRONYM_RE = /^[A-Z][A-Z0-9&]{1,9}s?$/u;
const NUMBER_RE = /^\p{N}+$/u;
const CAPITALISED_RE = /^\p{Lu}[\p{Ll}\p{N}'’]+(?:-\p{L}[\p{Ll}\p{N}'’]*)*$/u;
const NAME_CONNECTORS = new Set(['of', 'de', 'da', 'van', 'von', 'der', 'del', 'la', 'le', 'di']);

const isContent = (w: string) => w.length >= 3 && !STOP_WORDS.has(w) && !NUMBER_RE.test(w);

function normaliseAcronym(raw: string): string {
  const w = raw.replace(/s$/u, '');
  return w.toLowerCase();
}

interface Acc {
  kind: EntityKind;
  tf: number;
  first: number;
}

/** Entities of a text, the most salient first (names, acronyms, quantities, then phrases; by frequency). */
export function extractEntities(input: string, options: { max?: number } = {}): Mention[] {
  const text = input.length > MAX_TEXT ? input.slice(0, MAX_TEXT) : input;
  const found = new Map<string, Acc>();
  let order = 0;
  const add = (name: string, kind: EntityKind) => {
    if (name.length < 2 || name.length > 80) return;
    const prev = found.get(name);
    if (prev) {
      prev.tf += 1;
      if (KIND_PRIORITY[kind] < KIND_PRIORITY[prev.kind]) prev.kind = kind;
    } else found.set(name, { kind, tf: 1, first: order++ });
  };

  for (const m of text.matchAll(QUANTITY_RE)) {
    const unitRaw = m[3]!;
    const unit = unitRaw.toLowerCase();
    const unitKey = UNITS.has(unit) ? unit : UNITS.has(singular(unit)) ? singular(unit) : undefined;
    if (!unitKey) continue;
    const whole = m[1]!.replace(/,/g, '');
    const frac = m[2] ? `.${m[2].replace(/0+$/u, '')}` : '';
    add(`${whole}${frac === '.' ? '' : frac} ${unitKey}`, 'quantity');
  }

  for (const clause of text.split(CLAUSE_RE)) {
    const words = [...clause.matchAll(WORD_RE)].map((m) => m[0]);
    if (words.length === 0) continue;
    // names and acronyms (case-sensitive)
    let run: string[] = [];
    /** words that belong to a name or an acronym: not also counted in phrases */
    const named = new Set<number>();
    const flush = () => {
      while (run.length > 0 && NAME_CONNECTORS.has(run[run.length - 1]!.toLowerCase())) run.pop();
      if (run.length > 0) add(run.map(foldWord).join(' '), 'name');
      run = [];
    };
    words.forEach((w, i) => {
      if (ACRONYM_RE.test(w) && /[A-Z].*[A-Z]/u.test(w)) {
        flush();
        named.add(i);
        add(normaliseAcronym(w), 'acronym');
        return;
      }
      const capital = CAPITALISED_RE.test(w) && !STOP_WORDS.has(w.toLowerCase());
      const push = () => {
        run.push(w);
        named.add(i);
      };
      if (capital && (i > 0 || run.length > 0)) push();
      else if (capital && i === 0 && i + 1 < words.length && CAPITALISED_RE.test(words[i + 1]!)) push();
      else if (run.length > 0 && NAME_CONNECTORS.has(w.toLowerCase()) && i + 1 < words.length && CAPITALISED_RE.test(words[i + 1]!)) push();
      else flush();
      if (run.length >= 4) flush();
    });
    flush();
    // key noun phrases: adjacent content words (singular, lower case)
    const folded = words.map((w) => foldWord(w));
    for (let i = 0; i + 1 < folded.length; i++) {
      const a = folded[i]!;
      const b = folded[i + 1]!;
      if (named.has(i) || named.has(i + 1)) continue;
      if (isContent(a) && isContent(b)) add(`${singular(a)} ${singular(b)}`, 'phrase');
    }
  }

  const max = options.max ?? MAX_MENTIONS_PER_CHUNK;
  return [...found.entries()]
    .sort((x, y) => KIND_PRIORITY[x[1].kind] - KIND_PRIORITY[y[1].kind] || y[1].tf - x[1].tf || x[1].first - y[1].first)
    .slice(0, max)
    .map(([name, a], i) => ({ name, kind: a.kind, tf: a.tf, rank: i + 1 }));
}

const KIND_PRIORITY: Record<EntityKind, number> = { name: 0, acronym: 0, quantity: 1, phrase: 2 };

/**
 * What a query may match in the graph: its own entities, plus every single content word (which may be
 * a name or an acronym typed in lower case). Single words are matched only against name and acronym
 * entities (a bare common word is the lexical side's job).
 */
export function queryEntityCandidates(query: string): { entities: Mention[]; words: string[] } {
  const entities = extractEntities(query, { max: 32 });
  const words = new Set<string>();
  for (const m of query.matchAll(WORD_RE)) {
    const w = foldWord(m[0]);
    if (w.length >= 2 && !STOP_WORDS.has(w)) {
      words.add(w);
      if (/^[a-z0-9]+s$/u.test(w)) words.add(w.slice(0, -1));
    }
  }
  return { entities, words: [...words].slice(0, 32) };
}

/**
 * Code point order (UTF-8 byte order, Postgres' "C" collation). JavaScript's `<` compares UTF-16 code
 * units, which puts code points above U+FFFF (surrogate pairs) before U+E000–U+FFFF.
 */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys) return xs ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

/**
 * The co-occurrence pairs of one chunk's entities (names in rank order): each pair among the first
 * EDGE_RANK, once, as [a, b] with a before b in code point order.
 */
export function edgePairs(names: readonly string[]): Array<[string, string]> {
  const top = names.slice(0, EDGE_RANK);
  const pairs: Array<[string, string]> = [];
  for (const a of top) for (const b of top) if (compareCodePoints(a, b) < 0) pairs.push([a, b]);
  return pairs;
}

/** The entity kinds in the order of UploadGraph.kinds' codes. */
export const ENTITY_KINDS: readonly EntityKind[] = ['name', 'acronym', 'quantity', 'phrase'];

/**
 * A file's entity rows and co-occurrence edge rows, as search.repository stores them, in a compact form:
 * ingestion computes it in its sandbox process, and the request loop receives it as one string and three
 * typed arrays (a few milliseconds to deserialize for a 10 MB file, against ~100 ms for 250,000 small
 * arrays).
 */
export interface UploadGraph {
  /** the entities' names in code point order, joined by NUL (Postgres text never holds one) */
  names: string;
  /** each entity's kind, as an index into ENTITY_KINDS */
  kinds: Uint8Array;
  /** each entity's number of chunks that mention it */
  counts: Uint32Array;
  /** edges as (a, b, weight) triples of entity indices, ordered by (a, b): a's name before b's in code point order; weight = chunks where both are among the EDGE_RANK most salient */
  edges: Uint32Array;
}

/** Whether kind x is preferred to kind y for one name found as both: by priority, then by name of the kind. */
const preferredKind = (x: EntityKind, y: EntityKind) => KIND_PRIORITY[x] - KIND_PRIORITY[y] || compareCodePoints(x, y);

/** A pair of entity indices as one number, a · PAIR + b: exact while there are fewer than 2^26 entities. */
const PAIR = 2 ** 26;

/**
 * The graph rows of a file from its chunks' mentions, the same rows as search.repository's refresh
 * computes in SQL from the stored mentions (test/search-segments.test.ts compares them).
 */
export function uploadGraph(chunks: ReadonlyArray<readonly Mention[]>): UploadGraph {
  const index = new Map<string, number>();
  const names: string[] = [];
  const kinds: EntityKind[] = [];
  const counts: number[] = [];
  /** pair (a · PAIR + b, by first-seen index) → chunks where both are salient */
  const weights = new Map<number, number>();
  for (const mentions of chunks) {
    const ranked = [...mentions].sort((x, y) => x.rank - y.rank);
    for (const m of ranked) {
      let at = index.get(m.name);
      if (at === undefined) {
        at = names.length;
        index.set(m.name, at);
        names.push(m.name);
        kinds.push(m.kind);
        counts.push(1);
      } else {
        counts[at]!++;
        if (preferredKind(m.kind, kinds[at]!) < 0) kinds[at] = m.kind;
      }
    }
    for (const [a, b] of edgePairs(ranked.map((m) => m.name))) {
      const key = index.get(a)! * PAIR + index.get(b)!;
      weights.set(key, (weights.get(key) ?? 0) + 1);
    }
  }
  // Rows in the order of their primary keys, (upload, name) and (upload, a, b) in code point order: a
  // new upload's id (UUIDv7) is the largest, so each insert lands at the right edge of the btree instead
  // of a random leaf (15–40% less time to write a 10 MB file's 180,000 edges on the embedded engine).
  const order = names.map((_, i) => i).sort((x, y) => compareCodePoints(names[x]!, names[y]!));
  const rank = new Uint32Array(names.length);
  order.forEach((old, i) => (rank[old] = i));
  // the pairs again by their entities' new indices, sorted
  const sortedKeys = new Float64Array(weights.size);
  const sortedWeights = new Map<number, number>();
  let n = 0;
  for (const [key, w] of weights) {
    const sorted = rank[Math.floor(key / PAIR)]! * PAIR + rank[key % PAIR]!;
    sortedKeys[n++] = sorted;
    sortedWeights.set(sorted, w);
  }
  sortedKeys.sort();
  const edges = new Uint32Array(weights.size * 3);
  sortedKeys.forEach((key, i) => {
    edges[i * 3] = Math.floor(key / PAIR);
    edges[i * 3 + 1] = key % PAIR;
    edges[i * 3 + 2] = sortedWeights.get(key)!;
  });
  return {
    names: order.map((i) => names[i]).join('\u0000'),
    kinds: Uint8Array.from(order, (i) => ENTITY_KINDS.indexOf(kinds[i]!)),
    counts: Uint32Array.from(order, (i) => counts[i]!),
    edges,
  };
}

/** The graph's entity rows [name, kind, chunks] (names: the graph's names, split once by the caller). */
export function entityRows(graph: UploadGraph, names: readonly string[], from = 0, to = names.length): Array<[string, EntityKind, number]> {
  const rows: Array<[string, EntityKind, number]> = [];
  for (let i = from; i < Math.min(to, names.length); i++) rows.push([names[i]!, ENTITY_KINDS[graph.kinds[i]!]!, graph.counts[i]!]);
  return rows;
}

/**
 * The graph's edges as lists, one per first entity `a` (its neighbours b in code point order and their
 * weights), in order of a: the rows of kg_edge_lists. UploadGraph's edges are ordered by (a, b).
 */
export function edgeLists(graph: UploadGraph, names: readonly string[]): Array<[string, string[], number[]]> {
  const lists: Array<[string, string[], number[]]> = [];
  let current = -1;
  for (let e = 0; e < graph.edges.length; e += 3) {
    const a = graph.edges[e]!;
    if (a !== current) {
      lists.push([names[a]!, [], []]);
      current = a;
    }
    const list = lists[lists.length - 1]!;
    list[1].push(names[graph.edges[e + 1]!]!);
    list[2].push(graph.edges[e + 2]!);
  }
  return lists;
}

/** The names of a graph, by entity index. */
export const graphNames = (graph: UploadGraph): string[] => (graph.names === '' ? [] : graph.names.split('\u0000'));
