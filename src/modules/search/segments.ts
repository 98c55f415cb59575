import type { DbOrTx } from '../../db/client.js';
import * as repo from './search.repository.js';
import type { QueryLexeme, Scored } from './search.repository.js';
import { slicer, yieldToLoop } from '../../shared/slices.js';
import { bySimilarity, compareText, similarity, TrigramDictionary, trigrams, type Similar } from './trigrams.js';

/**
 * The search-side index of each upload held in memory ("segments"): its chunks' lexeme postings (BM25)
 * and its knowledge graph (entity mentions, kinds, co-occurrence edges), copied from Postgres, which
 * stays the one source of truth. Reading the postings of a scope from Postgres costs hundreds of
 * milliseconds per query on the embedded engine (a scan of the candidates' tsvectors: bench/RESULTS.md);
 * scored here, a query over the same scope takes a few.
 *
 * Correctness: a segment is the copy of one upload at one `upload_index_stats.version`. Every writer of
 * an upload's chunks, mentions or graph takes a new version in the same transaction (refreshUploadStatistics),
 * and every search reads the versions of its scope in the query that resolves the scope. A segment is used
 * only when its version is the one just read, so a change made on any node is seen by the next search on
 * every node, without an invalidation message.
 *
 * Memory: the cache is LRU-bounded by an estimate of its bytes (SEARCH_INDEX_CACHE_MB). A scope larger
 * than the bound is still searched: its segments are loaded for the query and not all kept.
 */

/**
 * One upload's index in a compact layout: sorted keys with offsets into flat typed arrays (a few bytes
 * per posting instead of an object per entry). A posting packs a chunk ordinal and a count as
 * `ordinal · 512 + count` (counts saturate at 511: Postgres keeps fewer positions of a lexeme than that).
 */
export interface Segment {
  uploadId: string;
  version: number;
  /** chunk ids by ordinal */
  ids: string[];
  /** BM25 length (lexemes counted with repetition) by ordinal */
  len: Uint32Array;
  /** sorted lexemes; the postings of terms[i] are postings[termStart[i] .. termStart[i + 1]) */
  terms: string[];
  /** hash table of terms' positions (keyTable) */
  termTable: Int32Array;
  termStart: Uint32Array;
  postings: Uint32Array;
  /** per term, the largest count and the shortest chunk among its postings (a bound on its BM25 part here) */
  termMaxTf: Uint16Array;
  termMinLen: Uint32Array;
  /** per term, the sum of its counts here (its collection frequency in this upload) */
  termCount: Uint32Array;
  /** the same pairs by chunk (term index · 512 + count): the terms of chunk o are docTerms[docStart[o] .. docStart[o + 1]) */
  docStart: Uint32Array;
  docTerms: Uint32Array;
  /** sorted entity names with their kind (KIND_CODES) and mentions, as for terms */
  names: string[];
  /** hash table of names' positions (keyTable) */
  nameTable: Int32Array;
  kinds: Uint8Array;
  nameStart: Uint32Array;
  mentions: Uint32Array;
  /** co-occurrence edges of names[i]: pairs (index of the other name, weight) in edges[2·edgeStart[i] .. 2·edgeStart[i + 1]) */
  edgeStart: Uint32Array;
  edges: Uint32Array;
  /** estimated heap bytes */
  bytes: number;
  /** while the cache holds it: the ids of its names in the cache's shared dictionary, at the dictionary's generation */
  nameIds?: { generation: number; ids: Int32Array };
  /** BM25's length normalisation k1·(1 − b + b·len / avgdl) by ordinal, for the last parameters a query used */
  norm?: { k1: number; b: number; avgdl: number; values: Float64Array };
  /** each term's fingerprint (hashKey, hashKey2) at [2i, 2i + 1], made on first use (neighbour expansion) and kept with the segment (counted in `bytes`) */
  termPrints?: Uint32Array;
}

const KIND_CODES = ['name', 'acronym', 'quantity', 'phrase'] as const;
const PROPER_KINDS: ReadonlySet<string> = new Set(['name', 'acronym']);
const kindCode = (kind: string) => Math.max(0, KIND_CODES.indexOf(kind as (typeof KIND_CODES)[number]));
const kindOf = (s: Segment, name: number): string => KIND_CODES[s.kinds[name]!]!;
/** A name or an acronym (what a misspelt query word is corrected to). */
const isProper = (s: Segment, name: number) => PROPER_KINDS.has(kindOf(s, name));
const COUNT_SHIFT = 9;
const COUNT_BITS = 1 << COUNT_SHIFT;
const MAX_COUNT = COUNT_BITS - 1;
const pack = (ord: number, count: number) => ord * COUNT_BITS + Math.min(MAX_COUNT, Math.max(1, count));
/** The chunk ordinal (or term index) and the count packed in a posting. */
const ordOf = (packed: number) => packed >>> COUNT_SHIFT;
const countOf = (packed: number) => packed & MAX_COUNT;

const PAGE_CHUNKS = 500;
/** Entity and edge rows read per statement (about 0.5 MB of JSON; a 10 MB file has ~70,000 entities and ~180,000 edges). */
const GRAPH_PAGE_ROWS = 10_000;
/** Edges in a stored edge list on average, for paging by about GRAPH_PAGE_ROWS edges (the 10 MB file: 178,646 in 7,526 lists). */
const EDGES_PER_LIST = 24;
/** Uploads read together when a scope's copies are missing. */
const BATCH_CHUNKS = 2_000;
const BATCH_UPLOADS = 500;
/** A load is retried when the upload changed while it was read (its version moved). */
const LOAD_ATTEMPTS = 3;

/**
 * Reads rows in pages, each after `before()`, the next page after the last row of the one before
 * (keyset paging: `read(undefined)` is the first page); a page shorter than `limit` is the last.
 */
async function forEachPage<R>(read: (last: R | undefined) => Promise<R[]>, limit: number, before: () => Promise<void>, each: (row: R) => void): Promise<void> {
  for (let last: R | undefined; ; ) {
    await before();
    const page = await read(last);
    for (const row of page) each(row);
    if (page.length < limit) return;
    last = page[page.length - 1];
  }
}

/**
 * Reads the lexemes of a tsvector's text form (`'lexeme':1,5A 'other':3`) with the number of their
 * positions, which is the tf the SQL side counted (`array_length(positions, 1)`, 1 without positions).
 * In that form a quote inside a lexeme is written twice and so is a backslash.
 */
export function forEachLexeme(text: string, visit: (lexeme: string, tf: number) => void): void {
  const n = text.length;
  let i = 0;
  while (i < n) {
    const open = text.indexOf("'", i);
    if (open < 0) return;
    let j = open + 1;
    let lexeme = '';
    let from = j;
    for (;;) {
      const q = text.indexOf("'", j);
      const b = text.indexOf('\\', j);
      if (q < 0) return; // malformed: no closing quote
      if (b >= 0 && b < q) {
        lexeme += text.slice(from, b) + text.charAt(b + 1);
        j = b + 2;
        from = j;
        continue;
      }
      if (text.charCodeAt(q + 1) === 39) {
        lexeme += text.slice(from, q) + "'";
        j = q + 2;
        from = j;
        continue;
      }
      lexeme += text.slice(from, q);
      j = q + 1;
      break;
    }
    let tf = 1;
    if (text.charCodeAt(j) === 58 /* : */) {
      j++;
      while (j < n && text.charCodeAt(j) !== 32) {
        if (text.charCodeAt(j) === 44 /* , */) tf++;
        j++;
      }
    }
    visit(lexeme, tf);
    i = j;
  }
}

/** FNV-1a over UTF-16 code units: where a key sits in a keyTable. */
export function hashKey(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * A second 32-bit hash of a key, of another family than hashKey's (a multiply-xorshift mix, then
 * MurmurHash3's finaliser): the two together are the key's 64-bit fingerprint (expandNeighbours).
 */
export function hashKey2(key: string): number {
  let h = 0x9747b28c;
  for (let i = 0; i < key.length; i++) {
    h = Math.imul(h ^ key.charCodeAt(i), 0x5bd1e995);
    h ^= h >>> 15;
  }
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The fingerprints of a segment's terms (Segment.termPrints). */
function termPrintsOf(s: Segment): Uint32Array {
  if (s.termPrints) return s.termPrints;
  const prints = new Uint32Array(s.terms.length * 2);
  for (let t = 0; t < s.terms.length; t++) {
    prints[2 * t] = hashKey(s.terms[t]!);
    prints[2 * t + 1] = hashKey2(s.terms[t]!);
  }
  return (s.termPrints = prints);
}

/**
 * An open-addressing hash table of the positions of `keys`, at least 1.5 slots a key; a slot is two
 * numbers, the position + 1 (0: empty) and the key's hash. A query looks its words up in every segment of
 * the scope: a binary search over tens of thousands of strings costs a dozen string comparisons where this
 * costs one, and the hash beside each slot spares reading the strings of the slots a probe passes over
 * (most lookups are of words a segment does not have).
 */
export function keyTable(keys: readonly string[]): Int32Array {
  let size = 4;
  while (size < keys.length * 1.5) size *= 2;
  const table = new Int32Array(size * 2);
  const mask = size - 1;
  for (let i = 0; i < keys.length; i++) {
    const hash = hashKey(keys[i]!);
    let slot = hash & mask;
    while (table[slot * 2] !== 0) slot = (slot + 1) & mask;
    table[slot * 2] = i + 1;
    table[slot * 2 + 1] = hash | 0;
  }
  return table;
}

/** The position of `key` (whose hashKey is `hash`) in `keys` by their keyTable, or -1. */
export function lookup(keys: readonly string[], table: Int32Array, key: string, hash: number): number {
  const mask = (table.length >> 1) - 1;
  const h = hash | 0;
  for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
    const v = table[slot * 2]!;
    if (v === 0) return -1;
    if (table[slot * 2 + 1] === h && keys[v - 1] === key) return v - 1;
  }
}

const termOf = (s: Segment, lexeme: string, hash = hashKey(lexeme)) => lookup(s.terms, s.termTable, lexeme, hash);
const nameOf = (s: Segment, name: string, hash = hashKey(name)) => lookup(s.names, s.nameTable, name, hash);

function push(map: Map<string, number[]>, key: string, value: number): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** Sorted keys with offsets into one flat array of their values. */
function compact(map: Map<string, number[]>): { keys: string[]; start: Uint32Array; values: Uint32Array } {
  const keys = [...map.keys()].sort();
  const start = new Uint32Array(keys.length + 1);
  let total = 0;
  for (const [i, k] of keys.entries()) {
    start[i] = total;
    total += map.get(k)!.length;
  }
  start[keys.length] = total;
  const values = new Uint32Array(total);
  for (const [i, k] of keys.entries()) values.set(map.get(k)!, start[i]!);
  return { keys, start, values };
}

interface Building {
  ids: string[];
  lens: number[];
  postings: Map<string, number[]>;
  mentions: Map<string, number[]>;
}

/**
 * Turns what was read of an upload into its segment. For a large file this is ~100 ms of work: it yields to
 * the event loop whenever a slice has run SLICE_MS of shared/slices.ts (checked every few hundred iterations of its loops).
 */
async function build(uploadId: string, version: number, x: Building, entities: Array<[string, string]>, edgeRows: Array<[string, string, number]>): Promise<Segment> {
  const slice = slicer();
  const p = compact(x.postings);
  await slice();
  // the forward index (relevance feedback reads the terms of a few chunks)
  const docStart = new Uint32Array(x.ids.length + 1);
  for (const v of p.values) docStart[ordOf(v) + 1]!++;
  for (let o = 0; o < x.ids.length; o++) docStart[o + 1] = docStart[o + 1]! + docStart[o]!;
  const docTerms = new Uint32Array(p.values.length);
  const fill = docStart.slice(0, x.ids.length);
  for (let t = 0; t < p.keys.length; t++) {
    for (let i = p.start[t]!; i < p.start[t + 1]!; i++) {
      const ord = ordOf(p.values[i]!);
      docTerms[fill[ord]!++] = pack(t, countOf(p.values[i]!));
    }
    if ((t & 255) === 255) await slice();
  }
  const lens = Uint32Array.from(x.lens);
  const termMaxTf = new Uint16Array(p.keys.length);
  const termMinLen = new Uint32Array(p.keys.length);
  const termCount = new Uint32Array(p.keys.length);
  for (let t = 0; t < p.keys.length; t++) {
    let maxTf = 0;
    let minLen = 0xffffffff;
    let count = 0;
    for (let i = p.start[t]!; i < p.start[t + 1]!; i++) {
      const tf = countOf(p.values[i]!);
      maxTf = Math.max(maxTf, tf);
      minLen = Math.min(minLen, lens[ordOf(p.values[i]!)]!);
      count += tf;
    }
    termMaxTf[t] = maxTf;
    termMinLen[t] = minLen;
    termCount[t] = count;
    if ((t & 1023) === 1023) await slice();
  }
  await slice();
  // every name of the upload's entities, also one without mentions left
  for (const [name] of entities) if (!x.mentions.has(name)) x.mentions.set(name, []);
  const m = compact(x.mentions);
  await slice();
  const nameTable = keyTable(m.keys);
  const nameAt = (name: string) => lookup(m.keys, nameTable, name, hashKey(name));
  const kinds = new Uint8Array(m.keys.length);
  for (const [n, [name, kind]] of entities.entries()) {
    const i = nameAt(name);
    if (i >= 0) kinds[i] = kindCode(kind);
    if ((n & 4095) === 4095) await slice();
  }
  const adjacency: number[][] = m.keys.map(() => []);
  for (const [n, [a, b, w]] of edgeRows.entries()) {
    const i = nameAt(a);
    const j = nameAt(b);
    if (i >= 0 && j >= 0) {
      adjacency[i]!.push(j, w);
      adjacency[j]!.push(i, w);
    }
    if ((n & 4095) === 4095) await slice();
  }
  await slice();
  const edgeStart = new Uint32Array(m.keys.length + 1);
  let total = 0;
  for (const [i, list] of adjacency.entries()) {
    edgeStart[i] = total;
    total += list.length / 2;
  }
  edgeStart[m.keys.length] = total;
  const edges = new Uint32Array(total * 2);
  for (const [i, list] of adjacency.entries()) edges.set(list, edgeStart[i]! * 2);
  // per chunk: its id, its length and its BM25 normalisation
  let bytes = 200 + x.ids.length * (64 + 4 + 8);
  // a term: its string, its two bounds and its count, and its fingerprint once a neighbour expansion asks for it
  for (const k of p.keys) bytes += 28 + k.length + 6 + 4 + 8;
  // a name: its string, its kind, and its id in the cache's dictionary (nameIds)
  for (const k of m.keys) bytes += 28 + k.length + 1 + 4;
  const termTable = keyTable(p.keys);
  bytes += (p.start.length + p.values.length + docStart.length + docTerms.length + m.start.length + m.values.length + edgeStart.length + edges.length) * 4;
  bytes += (termTable.length + nameTable.length) * 4;
  return {
    uploadId,
    version,
    ids: x.ids,
    len: lens,
    terms: p.keys,
    termTable,
    termStart: p.start,
    postings: p.values,
    termMaxTf,
    termMinLen,
    termCount,
    docStart,
    docTerms,
    names: m.keys,
    nameTable,
    kinds,
    nameStart: m.start,
    mentions: m.values,
    edgeStart,
    edges,
    bytes,
    // set later (by the cache, the first BM25 pass and the first neighbour expansion that reads the segment), in
    // any order: present from the start, so that every segment has one shape and the scoring loops, which read
    // many segments, see one (added as they came, the segments of a search came in several shapes:
    // bench/RESULTS.md, "Twenty-seventh pass")
    nameIds: undefined,
    norm: undefined,
    termPrints: undefined,
  };
}

/**
 * Reads the indexes of several uploads from Postgres: chunks in pages of bounded size (their postings
 * and mentions aggregated per chunk in SQL), then their entities and edges in pages, yielding to the
 * event loop between statements (and after `pace`, when given) and within long runs of work. Many small
 * uploads cost a few statements, not a few each.
 */
async function readSegments(db: DbOrTx, uploads: ReadonlyMap<string, number>, how: ReadOptions): Promise<Segment[]> {
  const graphPageRows = how.graphPageRows ?? GRAPH_PAGE_ROWS;
  const pageChunks = how.pageChunks ?? PAGE_CHUNKS;
  const ids = [...uploads.keys()];
  const b = new Map<string, Building>(ids.map((id) => [id, { ids: [], lens: [], postings: new Map(), mentions: new Map() }]));
  for (let after = { uploadId: '', index: -1 }; ; ) {
    await how.pace?.();
    const rows = await repo.chunkIndexPage(db, ids, after, pageChunks);
    const slice = slicer();
    for (const [n, r] of rows.entries()) {
      if ((n & 63) === 63) await slice();
      const x = b.get(r.uploadId)!;
      const ord = x.ids.length;
      x.ids.push(r.id);
      x.lens.push(r.lexLen);
      forEachLexeme(r.tsv, (lexeme, tf) => push(x.postings, lexeme, pack(ord, tf)));
      if (r.mentions) for (const [name, tf] of JSON.parse(r.mentions) as Array<[string, number]>) push(x.mentions, name, pack(ord, tf));
    }
    if (rows.length < pageChunks) break;
    after = rows[rows.length - 1]!;
    await yieldToLoop();
  }
  const beforePage = async () => {
    await yieldToLoop();
    await how.pace?.();
  };
  const entities = new Map<string, Array<[string, string]>>(ids.map((id) => [id, []]));
  await forEachPage<[string, string, string]>(
    (last) => repo.entityPage(db, ids, last ? { uploadId: last[0], name: last[1] } : { uploadId: '', name: '' }, graphPageRows),
    graphPageRows,
    beforePage,
    ([uploadId, name, kind]) => void entities.get(uploadId)!.push([name, kind]),
  );
  const edges = new Map<string, Array<[string, string, number]>>(ids.map((id) => [id, []]));
  const listsPerPage = Math.max(1, Math.ceil(graphPageRows / EDGES_PER_LIST));
  await forEachPage<[string, string, string[], number[]]>(
    (last) => repo.edgeListPage(db, ids, last ? { uploadId: last[0], a: last[1] } : { uploadId: '', a: '' }, listsPerPage),
    listsPerPage,
    beforePage,
    ([uploadId, a, bs, ws]) => {
      const into = edges.get(uploadId)!;
      for (let i = 0; i < bs.length; i++) into.push([a, bs[i]!, ws[i]!]);
    },
  );
  const out: Segment[] = [];
  for (const id of ids) {
    await yieldToLoop();
    out.push(await build(id, uploads.get(id)!, b.get(id)!, entities.get(id)!, edges.get(id)!));
  }
  return out;
}

function emptySegment(uploadId: string): Promise<Segment> {
  return build(uploadId, -1, { ids: [], lens: [], postings: new Map(), mentions: new Map() }, [], []);
}

/** How a scope's indexes are read: rows per statement, and what runs before each statement (a background read gives way to requests). */
interface ReadOptions {
  graphPageRows?: number;
  pageChunks?: number;
  pace?: () => Promise<void>;
}

/** Chunks per statement when a segment is read in the background (warm): ~25 ms of the engine each. */
const WARM_PAGE_CHUNKS = 100;

export interface ScopeEntry {
  id: string;
  chunks: number;
  version: number | null;
}

export class SegmentCache {
  private readonly segments = new Map<string, Segment>();
  private readonly loading = new Map<string, Promise<Segment>>();
  /** trigrams of the entity names of the segments held (fuzzy matching without a query): all, and names and acronyms alone */
  private readonly names = new TrigramDictionary();
  private readonly proper = new TrigramDictionary();
  private bytes = 0;
  /** keep() calls adding a segment's names: until each ends, the dictionaries hold names of a segment not yet held */
  private keeping = 0;
  private scratch = new Float64Array(0);
  hits = 0;
  loads = 0;

  /** `graphPageRows`: entity and edge rows read per statement (GRAPH_PAGE_ROWS; tests page smaller). */
  constructor(
    private readonly maxBytes: number,
    private readonly options: { graphPageRows?: number } = {},
  ) {}

  get size(): { segments: number; bytes: number } {
    return { segments: this.segments.size, bytes: this.bytes + this.names.liveBytes + this.proper.liveBytes + this.scratch.byteLength };
  }

  private holds(segment: Segment): boolean {
    return this.segments.get(segment.uploadId) === segment;
  }

  /**
   * Entity names of the scope's segments with pg_trgm similarity ≥ min to `text`, best first, at most
   * `limit`; `kinds` restricts the entity kinds. Names of held segments come from the shared trigram
   * index; a segment not held (a scope beyond the memory bound) has its names compared one by one.
   */
  similarEntities(segments: readonly Segment[], text: string, min: number, limit: number, kinds?: ReadonlySet<string>): Similar[] {
    const held = segments.filter((s) => this.holds(s));
    const accepted = (s: Segment, i: number) => i >= 0 && (!kinds || kinds.has(kindOf(s, i)));
    const best = new Map<string, number>();
    if (held.length > 0) {
      const dictionary = kinds && [...kinds].every((k) => PROPER_KINDS.has(k)) ? this.proper : this.names;
      // Every name of a dictionary is in a held segment (of a proper kind there, for the proper names'), so
      // when the scope holds every held segment and the kinds asked are the dictionary's, each name is in scope.
      // Not while a segment is being kept: its names are in the dictionaries a slice at a time before it is
      // held, and it may be another tenant's file.
      const everyHeld = this.keeping === 0 && new Set(held).size === this.segments.size;
      const dictionaryKinds = !kinds || (kinds.size === PROPER_KINDS.size && [...PROPER_KINDS].every((k) => kinds.has(k)));
      const inScope =
        everyHeld && dictionaryKinds
          ? () => true
          : (name: string) => {
              const hash = hashKey(name);
              return held.some((s) => accepted(s, nameOf(s, name, hash)));
            };
      for (const m of dictionary.similar(text, min, inScope, limit)) best.set(m.name, m.sim);
    }
    const others = segments.filter((s) => !this.holds(s));
    if (others.length > 0) {
      const q = trigrams(text);
      for (const s of others) {
        for (const [i, name] of s.names.entries()) {
          if (best.has(name) || !accepted(s, i)) continue;
          const sim = similarity(q, trigrams(name));
          if (sim >= min) best.set(name, sim);
        }
      }
    }
    return [...best.entries()]
      .map(([name, sim]) => ({ name, sim }))
      .sort(bySimilarity)
      .slice(0, limit);
  }

  /** The ids of a held segment's names in the dictionary shared by the held segments (undefined for one not held). */
  nameIdsOf(segment: Segment): Int32Array | undefined {
    if (!this.holds(segment)) return undefined;
    const held = segment.nameIds;
    if (held && held.generation === this.names.generation) return held.ids;
    // the dictionary was compacted since: its ids were renumbered
    const ids = Int32Array.from(segment.names, (name) => this.names.idOf(name));
    segment.nameIds = { generation: this.names.generation, ids };
    return ids;
  }

  nameAt(id: number): string {
    return this.names.nameAt(id);
  }

  holdsName(name: string): boolean {
    return this.names.idOf(name) >= 0;
  }

  /** A zeroed array with a slot for every name id, to be handed back zeroed (queries run one at a time on this thread). */
  nameScratch(): Float64Array {
    if (this.scratch.length < this.names.idCount) this.scratch = new Float64Array(Math.max(this.names.idCount, this.scratch.length * 2, 1024));
    return this.scratch;
  }

  /**
   * Reads the segments of uploads not held yet, in the background: after an ingestion, so that the first
   * search of a new file does not read its index (about 1.5 s for a 10 MB file). Small statements, each
   * after `pace` (on PGlite, the wait for requests to leave the engine alone). May evict older segments
   * beyond the bound, as a search would.
   */
  async warm(db: DbOrTx, scope: readonly ScopeEntry[], pace?: () => Promise<void>): Promise<void> {
    await this.segmentsOf(db, scope, { pageChunks: WARM_PAGE_CHUNKS, pace });
  }

  /** Whether the segment of this upload at this version is held. */
  holdsVersion(uploadId: string, version: number): boolean {
    return this.segments.get(uploadId)?.version === version;
  }

  /** The segments of a scope at the versions just read (uploads without indexed chunks have none). */
  async segmentsOf(db: DbOrTx, scope: readonly ScopeEntry[], how: Omit<ReadOptions, 'graphPageRows'> = {}): Promise<Segment[]> {
    const out: Array<Segment | Promise<Segment>> = [];
    const missing: Array<{ id: string; version: number; chunks: number }> = [];
    for (const s of scope) {
      if (s.chunks === 0 || s.version === null) continue;
      const cached = this.segments.get(s.id);
      if (cached && cached.version === s.version) {
        // most recently used last
        this.segments.delete(s.id);
        this.segments.set(s.id, cached);
        this.hits++;
        out.push(cached);
        continue;
      }
      const pending = this.loading.get(`${s.id}:${s.version}`);
      if (pending) out.push(pending);
      else missing.push({ id: s.id, version: s.version, chunks: s.chunks });
    }
    // read in batches of about BATCH_CHUNKS chunks (at most BATCH_UPLOADS uploads)
    for (let i = 0; i < missing.length; ) {
      const batch = new Map<string, number>();
      let chunks = 0;
      while (i < missing.length && batch.size < BATCH_UPLOADS && (batch.size === 0 || chunks + missing[i]!.chunks <= BATCH_CHUNKS)) {
        batch.set(missing[i]!.id, missing[i]!.version);
        chunks += missing[i]!.chunks;
        i++;
      }
      const loaded = this.load(db, batch, how);
      for (const [id, version] of batch) {
        const key = `${id}:${version}`;
        const one = loaded.then((m) => m.get(id)!);
        this.loading.set(key, one);
        void one.finally(() => this.loading.delete(key)).catch(() => undefined);
        out.push(one);
      }
      await loaded;
    }
    return Promise.all(out);
  }

  /**
   * Reads a batch and keeps each segment whose version did not move while it was read; one that moved
   * (the pages may mix two versions) is read again at its new version, up to LOAD_ATTEMPTS times.
   */
  private async load(db: DbOrTx, batch: ReadonlyMap<string, number>, how: Omit<ReadOptions, 'graphPageRows'>): Promise<Map<string, Segment>> {
    const result = new Map<string, Segment>();
    let pending = new Map(batch);
    for (let attempt = 1; pending.size > 0; attempt++) {
      const segments = await readSegments(db, pending, { ...how, graphPageRows: this.options.graphPageRows });
      this.loads += segments.length;
      const now = await repo.indexVersionsOf(db, [...pending.keys()]);
      const again = new Map<string, number>();
      for (const segment of segments) {
        const version = now.get(segment.uploadId);
        // its index was removed meanwhile (deleted, or ingested again): nothing of it to search
        if (version === undefined) result.set(segment.uploadId, await emptySegment(segment.uploadId));
        else if (version === segment.version) {
          await this.keep(segment);
          result.set(segment.uploadId, segment);
        } else if (attempt >= LOAD_ATTEMPTS) result.set(segment.uploadId, segment);
        else again.set(segment.uploadId, version);
      }
      pending = again;
    }
    return result;
  }

  /**
   * Holds a segment: its names join the shared dictionaries (the longest part of a large file's first load:
   * each new name's trigrams are indexed), a slice at a time with the event loop served between slices.
   * The new names are added before an older version of the same upload is dropped, so the names both share
   * stay indexed instead of being released, compacted away and indexed again. The segment is searched as
   * held only once all its names are in (until then its names are looked up by text).
   */
  private async keep(segment: Segment): Promise<void> {
    if (segment.bytes > this.maxBytes) {
      // searched without being held; an older version held is of no use any more
      const old = this.segments.get(segment.uploadId);
      if (old && old.version <= segment.version) this.drop(old);
      return;
    }
    const slice = slicer();
    const ids = new Int32Array(segment.names.length);
    const generation = this.names.generation;
    this.keeping++;
    try {
      for (const [i, name] of segment.names.entries()) {
        if ((i & 255) === 0) await slice();
        ids[i] = this.names.add(name);
        if (isProper(segment, i)) this.proper.add(name);
      }
    } finally {
      // from here to the end the segment is held or its names given back, without a yield
      this.keeping--;
    }
    const old = this.segments.get(segment.uploadId);
    if (old && old.version > segment.version) {
      // a newer version was kept while this one was read or added: give the references back
      this.release(segment);
      return;
    }
    if (old) this.drop(old);
    // a compaction switched in while this yielded renumbered the names: the ids are read again
    if (this.names.generation !== generation) for (const [i, name] of segment.names.entries()) ids[i] = this.names.idOf(name);
    segment.nameIds = { generation: this.names.generation, ids };
    this.segments.set(segment.uploadId, segment);
    this.bytes += segment.bytes;
    for (const s of this.segments.values()) {
      if (this.size.bytes <= this.maxBytes) break;
      this.drop(s);
    }
  }

  private drop(segment: Segment): void {
    this.segments.delete(segment.uploadId);
    segment.nameIds = undefined;
    this.bytes -= segment.bytes;
    this.release(segment);
  }

  /** Gives back the references a segment's names hold in the dictionaries. */
  private release(segment: Segment): void {
    for (const [i, name] of segment.names.entries()) {
      this.names.release(name);
      if (isProper(segment, i)) this.proper.release(name);
    }
  }
}

// ───────────── scoring over segments ─────────────

/** A scored chunk with where it lives (its segment and ordinal). */
export interface Located extends Scored {
  segment?: Segment;
  ord?: number;
}

/**
 * A hit with another score, written field by field: `{ ...hit, score }` gives the hits made before V8 optimizes the
 * function that makes them one shape and those made after another (a spread that also adds a property, a shape for
 * each object: bm25Params in retrieve.ts).
 */
const located = (hit: Located, score: number): Located => ({ id: hit.id, score, segment: hit.segment, ord: hit.ord });

/** Keeps the k best by score desc, then id asc, in O(n log k). */
export class TopK {
  private readonly heap: Located[] = [];
  constructor(private readonly k: number) {}

  /** true when (aScore, aId) ranks below (bScore, bId) */
  private static below(aScore: number, aId: string, bScore: number, bId: string): boolean {
    return aScore < bScore || (aScore === bScore && aId > bId);
  }

  /** true when a is worse than b */
  private static worse(a: Scored, b: Scored): boolean {
    return TopK.below(a.score, a.id, b.score, b.id);
  }

  offer(id: string, score: number, segment?: Segment, ord?: number): void {
    const h = this.heap;
    if (this.k <= 0) return;
    if (h.length === this.k) {
      const root = h[0]!;
      if (!TopK.below(root.score, root.id, score, id)) return;
      h[0] = { id, score, segment, ord };
      this.down(0);
      return;
    }
    h.push({ id, score, segment, ord });
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!TopK.worse(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  private down(i: number): void {
    const h = this.heap;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < h.length && TopK.worse(h[l]!, h[m]!)) m = l;
      if (r < h.length && TopK.worse(h[r]!, h[m]!)) m = r;
      if (m === i) return;
      [h[i], h[m]] = [h[m]!, h[i]!];
      i = m;
    }
  }

  /** The score a chunk must reach (and then have the smaller id) to be kept; −∞ until k are held. */
  get threshold(): number {
    return this.heap.length === this.k && this.k > 0 ? this.heap[0]!.score : Number.NEGATIVE_INFINITY;
  }

  sorted(): Located[] {
    return [...this.heap].sort((a, b) => b.score - a.score || compareText(a.id, b.id));
  }
}

export interface Bm25Params {
  k1: number;
  b: number;
  /** chunks in scope and their mean BM25 length */
  n: number;
  avgdl: number;
}

/**
 * Okapi BM25 with the scope's own statistics: N and avgdl of the scope, document frequencies counted
 * over the scope's chunks (over `allowed` when given: the chunks matching a websearch filter, by segment), so that
 * one tenant's documents never shape another's ranking.
 *   score(d) = Σ_t qtf_t · ln(1 + (N − df_t + 0.5) / (df_t + 0.5)) · tf·(k1 + 1) / (tf + k1·(1 − b + b·len_d / avgdl))
 * Returns the top k (exact: chunks are left unscored only when their bound cannot reach it), the document
 * frequency of every query lexeme found in scope, and how many chunks were scored in full.
 */
export function bm25(
  segments: readonly Segment[],
  lexemes: readonly QueryLexeme[],
  k: number,
  p: Bm25Params,
  allowed?: Allowed,
  where: TermPositions = new TermPositions(segments),
): { hits: Located[]; df: Map<string, number>; scored: number } {
  if (where.segments !== segments) throw new Error('bm25: the term positions are of other segments');
  // the position of each query lexeme in each segment's terms, found once
  const at = lexemes.map((l) => where.of(l.lexeme));
  const df = new Map<string, number>();
  for (const [li, { lexeme }] of lexemes.entries()) {
    let n = 0;
    for (const [si, s] of segments.entries()) {
      const t = at[li]![si]!;
      if (t < 0) continue;
      const bits = allowed?.get(s);
      if (!allowed) n += s.termStart[t + 1]! - s.termStart[t]!;
      else if (bits) for (let i = s.termStart[t]!; i < s.termStart[t + 1]!; i++) n += bits[ordOf(s.postings[i]!)]!;
    }
    if (n > 0) df.set(lexeme, n);
  }
  const weights = lexemes.map((l) => {
    const d = df.get(l.lexeme) ?? 0;
    return d === 0 ? 0 : (Number.isFinite(l.qtf) ? l.qtf : 0) * Math.log(1 + (p.n - d + 0.5) / (d + 0.5));
  });
  const top = new TopK(k);
  const k1 = p.k1;
  // the query terms found in scope, heaviest first
  const order = lexemes.map((_, li) => li).filter((li) => weights[li]! > 0).sort((x, y) => weights[y]! - weights[x]! || x - y);
  // one accumulator for every segment (NaN: not scored yet), reset through the ordinals touched
  const most = segments.reduce((m, s) => Math.max(m, s.ids.length), 0);
  const acc = new Float64Array(most).fill(Number.NaN);
  // the ordinals touched in the current segment: touched[0 .. kept) (a typed array, not a list emptied per
  // segment: a list set to length 0 lets its storage go, and growing it again allocated ~2 MB a query at 100k)
  const touched = new Int32Array(most);
  // the query terms present in the current segment, presentT/W/Ub[0 .. terms): term index, weight·(k1 + 1), bound
  const presentT = new Int32Array(order.length);
  const presentW = new Float64Array(order.length);
  const presentUb = new Float64Array(order.length);
  /** chunks scored in full (the others matching a term could not reach the top k) */
  let scored = 0;
  for (let si = 0; si < segments.length; si++) {
    const s = segments[si]!;
    const bits = allowed?.get(s);
    if (allowed && !bits) continue;
    const norm = normOf(s, p);
    // Exact top-k pruning (MaxScore): each query term present here, with the most it can add to a chunk of
    // this segment (BM25's part grows with tf and shrinks with length). A chunk holding none of the
    // "essential" terms cannot reach the score of the k-th kept so far, so only those terms' postings are
    // walked; the others are looked up for the chunks that can still make it. The terms are taken in
    // the query's order of weight, the same in every segment, so a chunk's parts are always added in the
    // same order and equal chunks get equal scores (their ties broken by id) whatever was pruned.
    let terms = 0;
    for (const li of order) {
      const t = at[li]![si]!;
      if (t < 0) continue;
      const w = weights[li]! * (k1 + 1);
      const maxTf = s.termMaxTf[t]!;
      presentT[terms] = t;
      presentW[terms] = w;
      presentUb[terms++] = (w * maxTf) / (maxTf + k1 * (1 - p.b + (p.b * s.termMinLen[t]!) / p.avgdl));
    }
    if (terms === 0) continue;
    let threshold = top.threshold;
    let essential = terms;
    let rest = 0;
    while (essential > 0 && (rest + presentUb[essential - 1]!) * MARGIN < threshold) rest += presentUb[--essential]!;
    if (essential === 0) continue;
    let kept = 0;
    for (let j = 0; j < essential; j++) {
      const t = presentT[j]!;
      const w = presentW[j]!;
      const end = s.termStart[t + 1]!;
      for (let i = s.termStart[t]!; i < end; i++) {
        const packed = s.postings[i]!;
        const ord = ordOf(packed);
        if (bits && bits[ord] === 0) continue;
        const tf = countOf(packed);
        const part = (w * tf) / (tf + norm[ord]!);
        const before = acc[ord]!;
        if (before !== before) {
          acc[ord] = part;
          touched[kept++] = ord;
        } else acc[ord] = before + part;
      }
    }
    // the other terms one by one: first drop the chunks that cannot reach the threshold even with all the
    // terms still to add, then add this term's part to the rest, by looking their counts up (a few chunks,
    // a long list) or by reading the list (many chunks)
    for (let j = essential; j < terms && kept > 0; j++) {
      let next = 0;
      for (let x = 0; x < kept; x++) {
        const ord = touched[x]!;
        if ((acc[ord]! + rest) * MARGIN < threshold) acc[ord] = Number.NaN;
        else touched[next++] = ord;
      }
      kept = next;
      const t = presentT[j]!;
      const w = presentW[j]!;
      rest -= presentUb[j]!;
      const from = s.termStart[t]!;
      const end = s.termStart[t + 1]!;
      if (kept * Math.log2(end - from + 1) < end - from) {
        for (let x = 0; x < kept; x++) {
          const ord = touched[x]!;
          const tf = countIn(s.postings, from, end, ord);
          if (tf > 0) acc[ord] = acc[ord]! + (w * tf) / (tf + norm[ord]!);
        }
      } else {
        for (let i = from; i < end; i++) {
          const packed = s.postings[i]!;
          const ord = ordOf(packed);
          const before = acc[ord]!;
          if (before !== before) continue;
          const tf = countOf(packed);
          acc[ord] = before + (w * tf) / (tf + norm[ord]!);
        }
      }
    }
    scored += kept;
    for (let x = 0; x < kept; x++) {
      const ord = touched[x]!;
      const score = acc[ord]!;
      acc[ord] = Number.NaN;
      if (score < threshold) continue;
      top.offer(s.ids[ord]!, score, s, ord);
      threshold = top.threshold;
    }
  }
  return { hits: top.sorted(), df, scored };
}

/**
 * Where query lexemes sit in each segment's terms (−1: absent), looked up once per lexeme and query:
 * a query's BM25 passes (the query, a corrected one, RM3's expansion) share most of their lexemes.
 */
export class TermPositions {
  private readonly at = new Map<string, Int32Array>();
  constructor(readonly segments: readonly Segment[]) {}

  of(lexeme: string): Int32Array {
    let positions = this.at.get(lexeme);
    if (!positions) {
      const hash = hashKey(lexeme);
      positions = new Int32Array(this.segments.length);
      for (let si = 0; si < positions.length; si++) positions[si] = termOf(this.segments[si]!, lexeme, hash);
      this.at.set(lexeme, positions);
    }
    return positions;
  }
}

/** Bounds are compared with this slack, so that rounding never prunes a chunk that could tie. */
const MARGIN = 1 + 1e-9;

/** The count of chunk `ord` in postings[from..to) (sorted by ordinal), 0 when it has none. */
function countIn(postings: Uint32Array, from: number, to: number, ord: number): number {
  const key = ord * COUNT_BITS;
  let lo = from;
  let hi = to;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (postings[mid]! < key) lo = mid + 1;
    else hi = mid;
  }
  return lo < to && ordOf(postings[lo]!) === ord ? countOf(postings[lo]!) : 0;
}

/** k1·(1 − b + b·len / avgdl) of each chunk of a segment, kept with it for the next query of the same parameters (scope). */
function normOf(s: Segment, p: Bm25Params): Float64Array {
  const held = s.norm;
  if (held && held.k1 === p.k1 && held.b === p.b && held.avgdl === p.avgdl) return held.values;
  const lenWeight = p.b / p.avgdl;
  const base = 1 - p.b;
  const values = new Float64Array(s.ids.length);
  for (let ord = 0; ord < values.length; ord++) values[ord] = p.k1 * (base + lenWeight * s.len[ord]!);
  s.norm = { k1: p.k1, b: p.b, avgdl: p.avgdl, values };
  return values;
}

/**
 * Relevance-model feedback terms (RM3's P(w|R)): the lexemes of the given chunks weighted by
 * Σ_d P(w|d)·P(d|q), with P(w|d) = tf / len_d and P(d|q) the chunks' normalised first-pass scores;
 * one-character lexemes left out; the n heaviest, ties by lexeme.
 */
export function feedbackTerms(docs: ReadonlyArray<{ segment: Segment; ord: number; weight: number }>, n: number): Array<{ lexeme: string; weight: number }> {
  const acc = new Map<string, number>();
  for (const { segment: s, ord, weight } of docs) {
    const len = Math.max(s.len[ord]!, 1);
    for (let i = s.docStart[ord]!; i < s.docStart[ord + 1]!; i++) {
      const lexeme = s.terms[ordOf(s.docTerms[i]!)]!;
      if (lexeme.length < 3 && [...lexeme].length <= 1) continue;
      acc.set(lexeme, (acc.get(lexeme) ?? 0) + (countOf(s.docTerms[i]!) / len) * weight);
    }
  }
  return [...acc.entries()]
    .map(([lexeme, w]) => ({ lexeme, weight: w }))
    .sort((a, b) => b.weight - a.weight || compareText(a.lexeme, b.lexeme))
    .slice(0, n);
}

export interface NeighbourExpansion {
  /** how many of the best candidates are scored again (the others keep their order below them) */
  candidates: number;
  /** neighbours per candidate */
  k: number;
  /** share of a candidate's own counts in its expanded counts */
  alpha: number;
}

/**
 * Document expansion with nearest neighbours (Tao, Wang, Mei & Zhai 2006), at query time and among the
 * first `candidates` hits only, which are all in the caller's scope: no other document, and so no other
 * tenant's, shapes a chunk's expanded counts.
 *
 * 1. Each candidate d is a tf·idf vector over its lexemes, L2-normalised, with the candidates as the collection
 *    and Robertson–Spärck Jones' idf floored at 0, max(0, ln((n − h + 0.5) / (h + 0.5))) for a lexeme h of the
 *    n candidates hold: a lexeme half of them hold or more tells them apart by nothing, and weighs 0; its k
 *    nearest other candidates b by cosine (ties: the better first-pass rank) get γ_d(b) = cos(d,b) / Σ of the k
 *    cosines (γ 0 when they are all 0).
 * 2. Expanded counts c′(w,d) = α·c(w,d) + (1 − α)·Σ_b γ_d(b)·c(w,b), and length |d′| = α·|d| + (1 − α)·Σ_b γ_d(b)·|b|.
 * 3. The candidates are scored again by query likelihood with Dirichlet smoothing over c′ (the paper's
 *    model), with the weighted terms q_w of the pass that found them:
 *      s(d) = Σ_w q_w·ln(1 + c′(w,d) / (μ·p(w|C))) + (Σ_w q_w)·ln(μ / (|d′| + μ)),
 *    μ = the scope's mean chunk length (the smoothing adapts to the length of the chunks, instead of the
 *    2,000 tokens fitted to long web pages), p(w|C) = the term's share of the scope's tokens (terms absent
 *    from the scope left out); sorted by s (ties: first-pass rank), reported as exp(s − max s) in (0, 1].
 * A chunk that shares its vocabulary with chunks that match the query well is credited with some of their
 * matches (a synonym, a term the author left implicit); one whose match is incidental loses ground.
 *
 * Measured on Cranfield (bench/RESULTS.md, "Twentieth pass"): the literature's k 10 and α 0.5 with 200
 * candidates. With α = 1 the candidates are ranked by query likelihood alone.
 * Hits beyond the candidates keep their first-pass order, with scores below the last candidate's.
 */
export function expandNeighbours(
  hits: readonly Located[],
  terms: readonly QueryLexeme[],
  where: TermPositions,
  p: Bm25Params,
  e: NeighbourExpansion,
): Located[] {
  const n = Math.min(e.candidates, hits.length);
  const k = Math.min(e.k, n - 1);
  if (n < 2) return [...hits];
  const head = hits.slice(0, n);
  if (head.some((h) => h.segment === undefined || h.ord === undefined)) return [...hits];
  const v = candidateVectors(head);
  const cos = pairCosines(v);

  // the query terms found in scope: weight, μ·p(w|C), and count per candidate (0 where it is absent)
  const total = p.n * p.avgdl;
  const mu = p.avgdl;
  const query: Array<{ w: number; mp: number }> = [];
  const slot = new Int32Array(v.ids.size).fill(-1);
  for (const t of terms) {
    if (!(t.qtf > 0) || !Number.isFinite(t.qtf)) continue;
    const at = where.of(t.lexeme);
    let ctf = 0;
    for (let si = 0; si < at.length; si++) if (at[si]! >= 0) ctf += where.segments[si]!.termCount[at[si]!]!;
    if (ctf === 0 || total <= 0) continue;
    const id = v.ids.find(hashKey(t.lexeme), hashKey2(t.lexeme));
    if (id >= 0) slot[id] = query.length;
    query.push({ w: t.qtf, mp: (mu * ctf) / total });
  }
  const weightSum = query.reduce((sum, t) => sum + t.w, 0);
  const tf = new Float64Array(query.length * n);
  for (let d = 0; d < n; d++) {
    for (let i = v.start[d]!; i < v.start[d + 1]!; i++) {
      const q = slot[v.termOf[i]!]!;
      if (q >= 0) tf[q * n + d] = v.counts[i]!;
    }
  }
  // each candidate's expanded counts and length from its k nearest, and its score
  const near = new Int32Array(k);
  const gamma = new Float64Array(k);
  const rescored: Array<{ hit: Located; s: number; rank: number }> = [];
  for (let d = 0; d < n; d++) {
    nearest(cos, n, d, near, gamma);
    let sum = 0;
    for (let j = 0; j < k; j++) sum += (gamma[j] = Math.max(0, gamma[j]!));
    for (let j = 0; j < k; j++) gamma[j] = sum > 0 ? gamma[j]! / sum : 0;
    let len = e.alpha * v.lens[d]!;
    for (let j = 0; j < k; j++) len += (1 - e.alpha) * gamma[j]! * v.lens[near[j]!]!;
    let s = weightSum * Math.log(mu / (len + mu));
    for (let q = 0; q < query.length; q++) {
      let c = e.alpha * tf[q * n + d]!;
      for (let j = 0; j < k; j++) c += (1 - e.alpha) * gamma[j]! * tf[q * n + near[j]!]!;
      if (c > 0) s += query[q]!.w * Math.log(1 + c / query[q]!.mp);
    }
    rescored.push({ hit: head[d]!, s, rank: d });
  }
  rescored.sort((a, b) => b.s - a.s || a.rank - b.rank);
  const best = rescored[0]!.s;
  const out: Located[] = [];
  for (const { hit, s } of rescored) out.push(located(hit, Math.exp(s - best)));
  // the tail below the last candidate, in its first-pass order
  const last = hits[n - 1]!.score;
  const floor = out[out.length - 1]!.score;
  const scale = last > 0 ? floor / last : 0;
  for (const h of hits.slice(n)) out.push(located(h, h.score * scale));
  return out;
}

/**
 * Ids of the lexemes of a few chunks from several segments, by their 64-bit fingerprints (hashKey, hashKey2,
 * kept with each segment): an open-addressing table grown with the distinct lexemes (a few hundred to a few
 * thousand, so it stays in cache). No string is read or compared: at 100k chunks the 200 candidates' 10k
 * lexemes took 2.8 ms by 32-bit hash and string equality, of which 1.1 ms were the strings. Two lexemes
 * with the same fingerprint would be counted as one in the neighbour expansion of one query: among the
 * 20,000 distinct lexemes of the largest head that happens with a probability of about 10⁻¹¹.
 */
class LexemeIds {
  private cap = 1024;
  private slotId = new Int32Array(this.cap).fill(-1);
  private slotA = new Uint32Array(this.cap);
  private slotB = new Uint32Array(this.cap);
  private readonly printA: number[] = [];
  private readonly printB: number[] = [];

  get size(): number {
    return this.printA.length;
  }

  /** The id of a fingerprint, −1 when it has none. */
  find(a: number, b: number): number {
    return this.slotId[this.probe(a, b)]!;
  }

  /** The id of a fingerprint, a new one when it has none. */
  add(a: number, b: number): number {
    const at = this.probe(a, b);
    if (this.slotId[at]! >= 0) return this.slotId[at]!;
    const id = this.printA.length;
    this.printA.push(a);
    this.printB.push(b);
    if (2 * this.printA.length > this.cap) this.grow();
    else this.place(at, id, a, b);
    return id;
  }

  /** The slot holding the fingerprint, or the empty slot where it would go. */
  private probe(a: number, b: number): number {
    const mask = this.cap - 1;
    let at = (a ^ b) & mask;
    for (;;) {
      const id = this.slotId[at]!;
      if (id < 0 || (this.slotA[at] === a && this.slotB[at] === b)) return at;
      at = (at + 1) & mask;
    }
  }

  private place(at: number, id: number, a: number, b: number): void {
    this.slotId[at] = id;
    this.slotA[at] = a;
    this.slotB[at] = b;
  }

  private grow(): void {
    this.cap *= 2;
    this.slotId = new Int32Array(this.cap).fill(-1);
    this.slotA = new Uint32Array(this.cap);
    this.slotB = new Uint32Array(this.cap);
    const mask = this.cap - 1;
    for (let id = 0; id < this.printA.length; id++) {
      const a = this.printA[id]!;
      const b = this.printB[id]!;
      let at = (a ^ b) & mask;
      while (this.slotId[at]! >= 0) at = (at + 1) & mask;
      this.place(at, id, a, b);
    }
  }
}

/** The candidates' lexemes in CSR form (local ids, counts, tf·idf weights L2-normalised) and how many candidates hold each. */
interface CandidateVectors {
  n: number;
  ids: LexemeIds;
  /** candidate d's entries are [start[d], start[d + 1]) */
  start: Uint32Array;
  termOf: Int32Array;
  counts: Float64Array;
  x: Float64Array;
  holders: Int32Array;
  lens: Float64Array;
}

/** tf·idf with the candidates as the collection and Robertson–Spärck Jones' idf floored at 0 (expandNeighbours, step 1). */
function candidateVectors(head: readonly Located[]): CandidateVectors {
  const n = head.length;
  let entries = 0;
  for (const h of head) entries += h.segment!.docStart[h.ord! + 1]! - h.segment!.docStart[h.ord!]!;
  const ids = new LexemeIds();
  const start = new Uint32Array(n + 1);
  const termOf = new Int32Array(entries);
  const counts = new Float64Array(entries);
  const holders = new Int32Array(entries);
  const lens = new Float64Array(n);
  let at = 0;
  for (let d = 0; d < n; d++) {
    const s = head[d]!.segment!;
    const ord = head[d]!.ord!;
    const prints = termPrintsOf(s);
    lens[d] = s.len[ord]!;
    const end = s.docStart[ord + 1]!;
    for (let i = s.docStart[ord]!; i < end; i++) {
      const packed = s.docTerms[i]!;
      const t = ordOf(packed);
      const id = ids.add(prints[2 * t]!, prints[2 * t + 1]!);
      termOf[at] = id;
      counts[at++] = countOf(packed);
      holders[id]!++;
    }
    start[d + 1] = at;
  }
  // the idf of a lexeme depends only on how many of the n candidates hold it: one logarithm per count
  const idf = new Float64Array(n + 1);
  for (let h = 1; h <= n; h++) idf[h] = Math.max(0, Math.log((n - h + 0.5) / (h + 0.5)));
  const x = new Float64Array(entries);
  for (let d = 0; d < n; d++) {
    let sq = 0;
    for (let i = start[d]!; i < start[d + 1]!; i++) {
      x[i] = counts[i]! * idf[holders[termOf[i]!]!]!;
      sq += x[i]! * x[i]!;
    }
    const norm = Math.sqrt(sq) || 1;
    for (let i = start[d]!; i < start[d + 1]!; i++) x[i] = x[i]! / norm;
  }
  return { n, ids, start, termOf, counts, x, holders, lens };
}

/**
 * The cosines of every pair of candidates (n × n, symmetric), summed lexeme by lexeme over the candidates
 * holding it: Σ over lexemes of holders², at most n · entries, and less since a lexeme one candidate holds
 * adds only to a norm and one that half of them hold weighs 0.
 */
function pairCosines(v: CandidateVectors): Float64Array {
  const { n, holders, start, termOf, x } = v;
  const vocabulary = v.ids.size;
  const counted = (h: number) => h > 1 && 2 * h < n;
  const byTerm = new Uint32Array(vocabulary + 1);
  for (let id = 0; id < vocabulary; id++) byTerm[id + 1] = byTerm[id]! + (counted(holders[id]!) ? holders[id]! : 0);
  const fill = byTerm.slice(0, vocabulary);
  const who = new Int32Array(byTerm[vocabulary]!);
  const weight = new Float64Array(byTerm[vocabulary]!);
  for (let d = 0; d < n; d++) {
    for (let i = start[d]!; i < start[d + 1]!; i++) {
      const id = termOf[i]!;
      if (!counted(holders[id]!)) continue;
      who[fill[id]!] = d;
      weight[fill[id]!++] = x[i]!;
    }
  }
  const cos = new Float64Array(n * n);
  for (let id = 0; id < vocabulary; id++) {
    const end = byTerm[id + 1]!;
    for (let i = byTerm[id]!; i < end; i++) {
      const base = who[i]! * n;
      const wi = weight[i]!;
      for (let j = i + 1; j < end; j++) {
        const at = base + who[j]!;
        cos[at] = cos[at]! + wi * weight[j]!;
      }
    }
  }
  // candidates were added in order, so each pair was summed into its upper half (a < b): mirror it
  for (let a = 0; a < n; a++) for (let b = a + 1; b < n; b++) cos[b * n + a] = cos[a * n + b]!;
  return cos;
}

/**
 * Fills `near` with candidate d's nearest others, by cosine descending and then first-pass rank (an insertion
 * into the k kept), and `value` with their cosines.
 */
function nearest(cos: Float64Array, n: number, d: number, near: Int32Array, value: Float64Array): void {
  const k = near.length;
  const row = d * n;
  let held = 0;
  // the k-th cosine kept, once k are
  let floor = Number.NEGATIVE_INFINITY;
  for (let b = 0; b < n; b++) {
    if (b === d) continue;
    const c = cos[row + b]!;
    if (held === k && !(c > floor)) continue;
    let j = held < k ? held++ : k - 1;
    while (j > 0 && c > value[j - 1]!) {
      near[j] = near[j - 1]!;
      value[j] = value[j - 1]!;
      j--;
    }
    near[j] = b;
    value[j] = c;
    if (held === k) floor = value[k - 1]!;
  }
}

/** Where the ids of the held segments' entity names come from (SegmentCache), to sum over segments without string keys. */
export interface NameIds {
  nameIdsOf(segment: Segment): Int32Array | undefined;
  /** whether some held segment has this name (a name no held segment has is looked for only in the others) */
  holdsName(name: string): boolean;
  nameAt(id: number): string;
  nameScratch(): Float64Array;
}

/**
 * Where entity names sit in each segment's names (−1: absent), looked up once per name: the graph
 * side of a query asks for its seeds' positions three times (exact match, edges, scores).
 */
export class NamePositions {
  private readonly at = new Map<string, Int32Array>();
  constructor(
    readonly segments: readonly Segment[],
    readonly ids?: NameIds,
  ) {}

  /** which segments the cache holds (their names are in its dictionary) */
  private held?: boolean[];

  of(name: string): Int32Array {
    let positions = this.at.get(name);
    if (!positions) {
      const hash = hashKey(name);
      const ids = this.ids;
      // a name the dictionary lacks is in no held segment
      const held = ids && !ids.holdsName(name) ? (this.held ??= this.segments.map((s) => ids.nameIdsOf(s) !== undefined)) : undefined;
      // a loop, not Int32Array.from(segments, f): that one walks an iterator and costs more than the lookups
      positions = new Int32Array(this.segments.length);
      for (let si = 0; si < positions.length; si++) positions[si] = held?.[si] ? -1 : nameOf(this.segments[si]!, name, hash);
      this.at.set(name, positions);
    }
    return positions;
  }
}

/** Entity names of the scope among `names` (any kind) and `words` (name and acronym entities only). */
export function exactEntities(where: NamePositions, names: readonly string[], words: readonly string[]): Set<string> {
  const found = new Set<string>();
  for (const n of names) if (where.of(n).some((i) => i >= 0)) found.add(n);
  for (const w of words) if (where.of(w).some((i, si) => i >= 0 && isProper(where.segments[si]!, i))) found.add(w);
  return found;
}

/** Co-occurrence edges touching the seeds, weights summed over the scope's uploads, strongest first (then by names). */
export function neighbours(where: NamePositions, seeds: readonly string[], limit: number): Array<{ a: string; b: string; w: number }> {
  const seedSet = new Set(seeds);
  const all: Array<{ a: string; b: string; w: number }> = [];
  // Names of held segments are summed by their shared id in a scratch array (edge weights are ≥ 1, so 0 is
  // "not touched"); names of a segment not held by their text. An edge has one seed end, or two (then it is
  // counted from the first name's, in code unit order), so the seeds' sums never hold the same edge.
  const ids = where.ids;
  const acc = ids?.nameScratch();
  const touched: number[] = [];
  for (const seed of seedSet) {
    const at = where.of(seed);
    const sum = new Map<string, number>();
    const skip = (other: string) => seedSet.has(other) && other < seed;
    for (let si = 0; si < at.length; si++) {
      const i = at[si]!;
      if (i < 0) continue;
      const s = where.segments[si]!;
      const { names, edges } = s;
      const gid = ids?.nameIdsOf(s);
      for (let e = s.edgeStart[i]! * 2, end = s.edgeStart[i + 1]! * 2; e < end; e += 2) {
        const g = gid ? gid[edges[e]!]! : -1;
        if (g >= 0 && acc) {
          if (acc[g] === 0) {
            if (skip(names[edges[e]!]!)) continue;
            touched.push(g);
          }
          acc[g] = acc[g]! + edges[e + 1]!;
          continue;
        }
        const other = names[edges[e]!]!;
        if (skip(other)) continue;
        sum.set(other, (sum.get(other) ?? 0) + edges[e + 1]!);
      }
    }
    if (ids && acc) {
      // Only the seed's `limit` strongest edges can be among the `limit` strongest of all (an edge is counted
      // from one seed): when no segment was summed by text, names below the limit-th weight are not spelt out
      // (a common seed touches thousands of names at 100k chunks; ties with the limit-th are kept).
      const floor = sum.size === 0 && limit >= 1 && touched.length > limit ? kthLargest(touched, acc, limit) : 0;
      for (const g of touched) {
        const w = acc[g]!;
        acc[g] = 0;
        if (w < floor) continue;
        const other = ids.nameAt(g);
        sum.set(other, (sum.get(other) ?? 0) + w);
      }
      touched.length = 0;
    }
    for (const [other, w] of sum) all.push(seed < other ? { a: seed, b: other, w } : { a: other, b: seed, w });
  }
  return all.sort((x, y) => y.w - x.w || compareText(x.a, y.a) || compareText(x.b, y.b)).slice(0, limit);
}

/** The k-th largest of values[ids[i]] (1 ≤ k ≤ ids.length), by selection on a copy. */
function kthLargest(ids: readonly number[], values: Float64Array, k: number): number {
  const v = new Float64Array(ids.length);
  for (let i = 0; i < ids.length; i++) v[i] = values[ids[i]!]!;
  // Hoare's selection for the (k − 1)-th position in descending order
  let lo = 0;
  let hi = v.length - 1;
  const target = k - 1;
  while (lo < hi) {
    const pivot = v[(lo + hi) >>> 1]!;
    let i = lo;
    let j = hi;
    while (i <= j) {
      while (v[i]! > pivot) i++;
      while (v[j]! < pivot) j--;
      if (i <= j) {
        const t = v[i]!;
        v[i] = v[j]!;
        v[j] = t;
        i++;
        j--;
      }
    }
    if (target <= j) hi = j;
    else if (target >= i) lo = i;
    else break;
  }
  return v[target]!;
}

/** 1 + ln tf for each count a posting can hold (0 unused). */
const TF_WEIGHT = Float64Array.from({ length: COUNT_BITS }, (_, c) => (c === 0 ? 0 : 1 + Math.log(c)));

/**
 * Knowledge-graph scores of the scope's chunks for weighted entities (weight μ_e), the best k:
 *   score(c) = Σ_e μ_e · ief(e) · (1 + ln tf_e,c),  ief(e) = ln(1 + N / df_e),
 * with df_e the chunks of the scope that mention e and N the scope's chunks.
 */
export function entityScores(where: NamePositions, weights: ReadonlyMap<string, number>, n: number, k: number): Located[] {
  const names = [...weights.keys()];
  const at = names.map((name) => where.of(name));
  const df = new Float64Array(names.length);
  for (const [si, s] of where.segments.entries()) {
    for (let e = 0; e < names.length; e++) {
      const i = at[e]![si]!;
      if (i >= 0) df[e] = df[e]! + s.nameStart[i + 1]! - s.nameStart[i]!;
    }
  }
  const w = names.map((name, e) => (df[e]! > 0 ? (weights.get(name) ?? 0) * Math.log(1 + n / df[e]!) : 0));
  const top = new TopK(k);
  // one accumulator for every segment (a part is > 0, so 0 is "not touched"), reset through the ordinals touched
  const most = where.segments.reduce((m, s) => Math.max(m, s.ids.length), 0);
  const acc = new Float64Array(most);
  // the ordinals touched in the current segment, touched[0 .. count) (as in bm25)
  const touched = new Int32Array(most);
  for (const [si, s] of where.segments.entries()) {
    let count = 0;
    for (let e = 0; e < names.length; e++) {
      const i = at[e]![si]!;
      if (i < 0 || w[e] === 0) continue;
      for (let j = s.nameStart[i]!; j < s.nameStart[i + 1]!; j++) {
        const ord = ordOf(s.mentions[j]!);
        if (acc[ord] === 0) touched[count++] = ord;
        acc[ord] = acc[ord]! + w[e]! * TF_WEIGHT[countOf(s.mentions[j]!)]!;
      }
    }
    let threshold = top.threshold;
    for (let x = 0; x < count; x++) {
      const ord = touched[x]!;
      const score = acc[ord]!;
      acc[ord] = 0;
      if (score < threshold) continue;
      top.offer(s.ids[ord]!, score, s, ord);
      threshold = top.threshold;
    }
  }
  return top.sorted();
}

/** A text-search query without phrase operators: lexemes under NOT, AND and OR. */
export type TsQueryNode = { op: 'lexeme'; lexeme: string } | { op: 'not'; arg: TsQueryNode } | { op: 'and' | 'or'; left: TsQueryNode; right: TsQueryNode };

/**
 * Reads a tsquery's text form (`'method' & !'dash' | 'exact'`) as Postgres writes it. Returns null for the
 * empty query (it matches nothing) and undefined for what the copies cannot evaluate: phrase operators
 * (`<->`, `<N>`: they need positions), prefixes and weights (`:*`, `:AB`).
 * Precedence as in Postgres: `!` binds tighter than `&`, `&` tighter than `|`.
 */
export function parseTsQuery(text: string): TsQueryNode | null | undefined {
  let i = 0;
  let unsupported = false;
  const space = () => {
    while (text[i] === ' ') i++;
  };
  const primary = (): TsQueryNode | undefined => {
    space();
    if (text[i] === '!') {
      i++;
      const arg = primary();
      return arg && { op: 'not', arg };
    }
    if (text[i] === '(') {
      i++;
      const inner = or();
      space();
      if (text[i] !== ')') return undefined;
      i++;
      return inner;
    }
    if (text[i] !== "'") return undefined;
    let lexeme = '';
    for (i++; i < text.length; i++) {
      if (text[i] === '\\') lexeme += text[++i] ?? '';
      else if (text[i] === "'" && text[i + 1] === "'") lexeme += text[++i];
      else if (text[i] === "'") break;
      else lexeme += text[i];
    }
    if (text[i] !== "'") return undefined;
    i++;
    if (text[i] === ':') unsupported = true;
    return { op: 'lexeme', lexeme };
  };
  const and = (): TsQueryNode | undefined => {
    let left = primary();
    for (;;) {
      space();
      if (text[i] === '<') unsupported = true;
      if (!left || text[i] !== '&') return left;
      i++;
      const right = primary();
      if (!right) return undefined;
      left = { op: 'and', left, right };
    }
  };
  const or = (): TsQueryNode | undefined => {
    let left = and();
    for (;;) {
      space();
      if (!left || text[i] !== '|') return left;
      i++;
      const right = and();
      if (!right) return undefined;
      left = { op: 'or', left, right };
    }
  };
  space();
  if (i >= text.length) return null;
  const node = or();
  space();
  return unsupported || !node || i < text.length ? undefined : node;
}

/** The chunks a websearch filter lets through, by segment: 1 at the ordinal of each (a segment absent: none). */
export type Allowed = ReadonlyMap<Segment, Uint8Array>;

/**
 * The chunks of the segments that match the query (Postgres' `tsv @@ query` for queries without phrases).
 * Evaluated per segment on sorted lists of ordinals: a lexeme's postings read in place, each `and` / `or`
 * merged into one scratch buffer, a negation kept as a flag on its list (De Morgan) rather than spelt out over
 * the segment. The work is the query's postings; a typed array per node and segment (the first version) cost
 * 4–7 ms at 100k chunks for a query of eleven lexemes and two exclusions, mostly in allocating them.
 */
export function matching(segments: readonly Segment[], query: TsQueryNode | null): Allowed {
  const out = new Map<Segment, Uint8Array>();
  if (query === null) return out;
  const merges = countMerges(query);
  // one buffer for every segment's bytes, and one for the merges' lists (each at most a segment's chunks long)
  const all = new Uint8Array(segments.reduce((n, s) => n + s.ids.length, 0));
  const scratch = new Uint32Array(merges * segments.reduce((m, s) => Math.max(m, s.ids.length), 0));
  let at = 0;
  for (const s of segments) {
    const n = s.ids.length;
    const hit = all.subarray(at, at + n);
    at += n;
    const set = matchList(s, query, { scratch, used: 0 });
    const size = set.to - set.from;
    if (set.negated ? size === n : size === 0) continue;
    if (set.negated) hit.fill(1);
    const value = set.negated ? 0 : 1;
    for (let i = set.from; i < set.to; i++) hit[set.src[i]! >>> set.shift] = value;
    out.set(s, hit);
  }
  return out;
}

const countMerges = (node: TsQueryNode): number => (node.op === 'lexeme' ? 0 : node.op === 'not' ? countMerges(node.arg) : 1 + countMerges(node.left) + countMerges(node.right));

/** A sorted list of a segment's chunk ordinals, src[from..to) >>> shift (a term's postings, or a merge's list in the scratch buffer); `negated`: every chunk but those. */
interface OrdList {
  src: Uint32Array;
  from: number;
  to: number;
  shift: number;
  negated: boolean;
}

const NO_ORDS = new Uint32Array(0);

function matchList(s: Segment, node: TsQueryNode, space: { scratch: Uint32Array; used: number }): OrdList {
  if (node.op === 'lexeme') {
    const t = termOf(s, node.lexeme);
    return t < 0 ? { src: NO_ORDS, from: 0, to: 0, shift: 0, negated: false } : { src: s.postings, from: s.termStart[t]!, to: s.termStart[t + 1]!, shift: COUNT_SHIFT, negated: false };
  }
  if (node.op === 'not') {
    const arg = matchList(s, node.arg, space);
    // field by field, as `located` writes hits
    return { src: arg.src, from: arg.from, to: arg.to, shift: arg.shift, negated: !arg.negated };
  }
  const n = s.ids.length;
  if (node.op === 'and') {
    // An and-chain at once, its plain operands shortest first: the first intersection is short, and the longer
    // lists after it are skipped through (mergeOrds), then the negated operands are taken out of it (A ∧ ¬B =
    // A \ B). Without a plain operand, De Morgan: ¬A ∧ ¬B = ¬(A ∪ B).
    const operands = andOperands(node).map((child) => matchList(s, child, space));
    const plain = operands.filter((o) => !o.negated).sort((x, y) => x.to - x.from - (y.to - y.from));
    const negated = operands.filter((o) => o.negated);
    if (plain.length === 0) return negated.slice(1).reduce((acc, o) => mergeOrds(acc, o, EITHER, true, space, n), negated[0]!);
    let acc = plain[0]!;
    for (const o of plain.slice(1)) acc = mergeOrds(acc, o, BOTH, false, space, n);
    for (const o of negated) acc = mergeOrds(acc, o, FIRST, false, space, n);
    return acc;
  }
  const a = matchList(s, node.left, space);
  const b = matchList(s, node.right, space);
  // De Morgan: A ∨ ¬B = ¬(B \ A), ¬A ∨ ¬B = ¬(A ∩ B)
  if (!a.negated && !b.negated) return mergeOrds(a, b, EITHER, false, space, n);
  if (!a.negated) return mergeOrds(b, a, FIRST, true, space, n);
  if (!b.negated) return mergeOrds(a, b, FIRST, true, space, n);
  return mergeOrds(a, b, BOTH, true, space, n);
}

/** The operands of a chain of `and`s, in order. */
function andOperands(node: TsQueryNode, out: TsQueryNode[] = []): TsQueryNode[] {
  if (node.op === 'and') {
    andOperands(node.left, out);
    andOperands(node.right, out);
  } else out.push(node);
  return out;
}

/** The first position in src[from..to) whose ordinal (>>> shift) is not below x (`to` when none): a doubling step, then a binary search. */
function seek(src: Uint32Array, shift: number, from: number, to: number, x: number): number {
  let lo = from;
  for (let step = 1; lo < to && src[lo]! >>> shift < x; step *= 2) {
    const next = lo + step;
    if (next >= to || src[next]! >>> shift >= x) {
      let l = lo + 1;
      let h = Math.min(next, to);
      while (l < h) {
        const m = (l + h) >>> 1;
        if (src[m]! >>> shift < x) l = m + 1;
        else h = m;
      }
      return l;
    }
    lo = next;
  }
  return lo;
}

const BOTH = 0;
const EITHER = 1;
const FIRST = 2;
/** A list this many times longer than the other is skipped through rather than read. */
const SKIP_RATIO = 8;

/**
 * Two lists merged into the scratch buffer: the ordinals in both, in either, or in the first only. A list many
 * times longer than the other is skipped through (seek) for those in both or in the first only.
 */
function mergeOrds(a: OrdList, b: OrdList, keep: number, negated: boolean, space: { scratch: Uint32Array; used: number }, n: number): OrdList {
  if (keep === BOTH && a.to - a.from > SKIP_RATIO * (b.to - b.from)) return mergeOrds(b, a, BOTH, negated, space, n);
  const out = space.scratch;
  const from = space.used;
  let k = from;
  let i = a.from;
  let j = b.from;
  const as = a.src;
  const bs = b.src;
  if (keep !== EITHER && b.to - b.from > SKIP_RATIO * (a.to - a.from)) {
    for (; i < a.to; i++) {
      const x = as[i]! >>> a.shift;
      j = seek(bs, b.shift, j, b.to, x);
      const found = j < b.to && bs[j]! >>> b.shift === x;
      if (found === (keep === BOTH)) out[k++] = x;
    }
    space.used = from + n;
    return { src: out, from, to: k, shift: 0, negated };
  }
  while (i < a.to && j < b.to) {
    const x = as[i]! >>> a.shift;
    const y = bs[j]! >>> b.shift;
    if (x === y) {
      if (keep !== FIRST) out[k++] = x;
      i++;
      j++;
    } else if (x < y) {
      if (keep !== BOTH) out[k++] = x;
      i++;
    } else {
      if (keep === EITHER) out[k++] = y;
      j++;
    }
  }
  if (keep !== BOTH) for (; i < a.to; i++) out[k++] = as[i]! >>> a.shift;
  if (keep === EITHER) for (; j < b.to; j++) out[k++] = bs[j]! >>> b.shift;
  space.used = from + n; // each list holds at most n distinct ordinals
  return { src: out, from, to: k, shift: 0, negated };
}

/** The same for chunk ids found otherwise (a phrase filter Postgres evaluated). */
export function allowedOf(segments: readonly Segment[], ids: ReadonlySet<string>): Allowed {
  const out = new Map<Segment, Uint8Array>();
  for (const s of segments) {
    const hit = new Uint8Array(s.ids.length);
    let any = false;
    for (let o = 0; o < s.ids.length; o++) {
      if (ids.has(s.ids[o]!)) {
        hit[o] = 1;
        any = true;
      }
    }
    if (any) out.set(s, hit);
  }
  return out;
}
