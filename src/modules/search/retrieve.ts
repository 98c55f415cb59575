import { sql, type SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import type { AppContext } from '../../context.js';
import type { DbOrTx } from '../../db/client.js';
import { textArray } from '../../db/search.js';
import { isUuid } from '../../shared/ids.js';
import type { AuthContext } from '../identity/auth-context.js';
import { presentUpload } from '../vault/uploads.presenters.js';
import { packVector, type PackedVector } from './vectors.js';
import { fuse, METHODS, type Method, type Ranked } from './fusion.js';
import { queryEntityCandidates } from './graph.js';
import * as repo from './search.repository.js';
import type { QueryLexeme, ScopeUpload } from './search.repository.js';
import { sameScope, ScopeCache } from './scopes.js';
import { searchScopeCondition, snippetIsHidden } from './search.policy.js';
import { allowedOf, bm25, type Bm25Params, entityScores, exactEntities, expandNeighbours, feedbackTerms, matching, NamePositions, neighbours, parseTsQuery, TermPositions, type Allowed, type Located, type NeighbourExpansion, type Segment, type SegmentCache } from './segments.js';
import { CONFIDENTIAL_SNIPPET, makeSnippet, queryTerms } from './snippet.js';

/**
 * THE retrieval of the service: the content-search route and the Q&A pipeline both call `retrieve`.
 *
 * scope (search.policy) → three ranked lists over the scope's chunks:
 *   dense   pgvector cosine (HNSW with iterative scan, or an exact scan for small scopes), in Postgres,
 *   lexical Okapi BM25 over the english tsvector with the scope's own statistics, plus a trigram
 *           correction of misspelt names, then RM3 feedback, and the feedback pass's head ranked again
 *           with document expansion by nearest neighbours among it (segments.ts, expandNeighbours),
 *   kag     query entities → matched entities (exact, then trigram-fuzzy) → their chunks, plus one
 *           hop along the strongest co-occurrence edges with a decay, scored by inverse entity frequency
 * → fusion (fusion.ts) → minScore on the dense cosine of `rag` results → snippets.
 * The lexical and graph sides are scored from in-memory copies of the scope's upload indexes
 * (segments.ts: valid by version, so always those Postgres holds), while the dense query runs.
 */

export const SOURCES = ['rag', 'kag', 'fused'] as const;
export type Source = (typeof SOURCES)[number];

export interface SearchHit {
  uploadId: string;
  chunkId: string;
  chunkIndex: number;
  /** the full chunk text, for the answer pipeline; never sent by the content-search route */
  text: string;
  snippet: string;
  score: number;
  source: Source;
  /** cosine similarity of the chunk to the query (what minScore filters) */
  denseScore: number | null;
  /** normalised score of each method that found the chunk */
  scores: Partial<Record<Method, number>>;
  upload: ReturnType<typeof presentUpload>;
}

export interface RetrieveOptions {
  limit: number;
  uploadIds?: string[];
  collectionIds?: string[];
  minScore?: number;
  /** evaluation: run only these methods (default all three) */
  methods?: readonly Method[];
  /** benchmark: force the exact dense scan (true) or the index (false); default by scope size */
  exactDense?: boolean;
  /** read the rows of the likely first results while the graph side is scored (retrieve; not for evaluations) */
  prefetchRows?: boolean;
}

export interface RetrieveResult {
  results: SearchHit[];
  totalScanned: number;
  uploadCount: number;
  tookMs: number;
}

/** At most this many ids of selectedUploadIds / collectionIds are considered. */
export const MAX_SELECTED_IDS = 5000;
/**
 * Up to this many chunks in scope the dense side compares every vector (exact, and there faster than
 * walking the HNSW graph); above it, the HNSW index. bench/search.ts, one run: exact p50 15.6 ms vs
 * HNSW 46 ms at 1k chunks, exact 941 ms vs HNSW 27 ms at 10k.
 */
export const EXACT_SCAN_MAX_CHUNKS = 2_000;
/** BM25 parameters: the usual defaults (Robertson; Lucene), not fitted to any collection. */
export const BM25 = { k1: 1.2, b: 0.75 };

/**
 * BM25's parameters for a scope of n chunks of lexTotal lexemes in all. An object literal, not `{ ...BM25, n, avgdl }`:
 * once V8 has optimized the function that makes it, an object spread and then given new properties gets a hidden class
 * of its own every time, and BM25's optimized code, which reads these in its loops, was thrown away again and again
 * (bench/RESULTS.md, "Twenty-seventh pass"; a test compares the shapes).
 */
export const bm25Params = (n: number, lexTotal: number): Bm25Params => ({ k1: BM25.k1, b: BM25.b, n, avgdl: Math.max(1, lexTotal / Math.max(1, n)) });
/** Trigram similarity needed for a fuzzy entity or name match. */
const FUZZY_MIN = 0.5;
/** The entity kinds a misspelt query word is corrected to. */
const NAME_KINDS: ReadonlySet<string> = new Set(['name', 'acronym']);
/** One hop: neighbours per matched entity, and the decay of their contribution. */
const HOP_NEIGHBOURS = 3;
const HOP_DECAY = 0.5;

/** How deep the lexical and graph lists go: BM25's tail still feeds RM3 and the fusion's candidates. */
const depthFor = (limit: number) => Math.min(200, Math.max(50, limit * 2));
/**
 * How deep the dense list goes: twice the page, at least 20. In the fusion the dense list's top 10 sets its
 * weight and its candidates complete BM25's; ranks 21–50 changed nothing on Cranfield (fused nDCG@10
 * 0.3895 at depth 20 and at 50, `npm run eval:search`), while a filtered HNSW walk costs about its depth
 * divided by the scope's share of the index: at 10k chunks of 100k, 12–15 ms at 50 and 6–7 ms at 20.
 */
const denseDepthFor = (limit: number) => Math.min(200, Math.max(20, limit * 2));

/** Builds the SQL condition of the scope: the policy's eligible files ∩ the selected ids ∩ the collections (and their sub-collections). */
function scopeCondition(auth: AuthContext, uploadIds?: string[], collectionIds?: string[]): SQL {
  const parts: SQL[] = [searchScopeCondition(auth, 'u')];
  if (uploadIds !== undefined) {
    const ids = [...new Set(uploadIds.filter(isUuid))];
    parts.push(sql`u.id = any(${textArray(ids)}::text[])`);
  }
  if (collectionIds !== undefined) {
    const ids = [...new Set(collectionIds.filter(isUuid))];
    parts.push(sql`u.collection_id in (
      with recursive tree(id) as (
        select c.id from collections c where c.id = any(${textArray(ids)}::text[])
        union select c.id from collections c join tree t on c.parent_id = t.id)
      select id from tree)`);
  }
  return sql.join(parts, sql` and `);
}

export interface RankedLists {
  lists: Partial<Record<Method, Ranked[]>>;
  uploadCount: number;
  chunkCount: number;
  vector: PackedVector | null;
  /** the scope as this search's statement read it (with the versions of its files' rows) */
  scope: readonly ScopeUpload[];
  /** with `prefetchRows` and a lexical list: the chunk rows of its head and the dense list's, read while the graph side was scored */
  rows?: Promise<repo.ChunkRow[]>;
}

/**
 * The three ranked lists of a query over the caller's scope (exported for the evaluation tools).
 *
 * The scope statement is sent first, as always; when this node holds the scope that the same condition
 * returned last time (scopes.ts), the lists are ranked over it while the statement runs in the database,
 * and kept only if the statement returns the same scope. Otherwise they are ranked again over the scope
 * just read: the lists are always those of the scope as it was when this search started, or later.
 */
export async function rankLists(ctx: AppContext, auth: AuthContext, query: string, options: RetrieveOptions): Promise<RankedLists> {
  const condition = scopeCondition(auth, options.uploadIds, options.collectionIds);
  const scopes = ctx.searchScopes;
  const key = ScopeCache.keyOf(scopeDialect.sqlToQuery(condition));
  const held = scopes.get(key);
  // Over a held scope the graph side is scored at once and the lexical side right after it: the query's
  // lexemes (and a query's operators: statements that need no scope) are asked for before the scope, so as
  // not to wait behind it and the dense search.
  const lexicalQuery = held !== undefined && held.some((s) => s.chunks > 0) && (options.methods ?? METHODS).includes('lexical') ? askLexical(ctx.db, query) : undefined;
  const reading = repo.scopeUploads(ctx.db, condition);
  if (held === undefined) {
    const scope = await reading;
    scopes.set(key, scope);
    scopes.stats.missed++;
    return rankOver(ctx, condition, scope, query, options);
  }
  reading.catch(() => undefined); // awaited below, after the ranking has started
  const abandoned = { yes: false };
  const ranking = rankOver(ctx, condition, held, query, options, { abandoned, lexicalQuery });
  ranking.catch(() => undefined); // awaited when the scope is confirmed
  let scope: ScopeUpload[];
  try {
    scope = await reading;
  } catch (err) {
    abandoned.yes = true;
    throw err;
  }
  if (sameScope(held, scope)) {
    scopes.stats.confirmed++;
    // ranked over the held copy; the rows' versions are those just read
    return { ...(await ranking), scope };
  }
  scopes.set(key, scope);
  scopes.stats.stale++;
  abandoned.yes = true;
  return rankOver(ctx, condition, scope, query, options, { lexicalQuery });
}

/** Renders a scope condition to its SQL text and parameters (the key of its held scope). */
const scopeDialect = new PgDialect();

async function rankOver(
  ctx: AppContext,
  condition: SQL,
  scope: readonly ScopeUpload[],
  query: string,
  options: RetrieveOptions,
  early: { abandoned?: { readonly yes: boolean }; lexicalQuery?: LexicalQuery } = {},
): Promise<RankedLists> {
  const abandoned = early.abandoned ?? { yes: false };
  const db = ctx.db;
  const chunkCount = scope.reduce((n, s) => n + s.chunks, 0);
  const lexTotal = scope.reduce((n, s) => n + s.lexLen, 0);
  const methods = new Set(options.methods ?? METHODS);
  const depth = depthFor(options.limit);
  const lists: Partial<Record<Method, Ranked[]>> = {};
  let vector: PackedVector | null = null;
  if (scope.length === 0 || chunkCount === 0) return { lists, uploadCount: scope.length, chunkCount, vector, scope };

  // the query vector is needed for minScore and the dense score of every result, even without the dense list
  const embedder = ctx.providers.embedder;
  const [v] = await embedder.embed([query]);
  // A query without letters or digits gets the zero vector from the local embedder: it has no direction,
  // its cosine with anything is undefined (NaN in pgvector), so there is no dense side for it.
  if (v && v.some((x) => x !== 0)) vector = packVector(v, embedder.dimensions);
  // a ranking over a held scope that its statement did not confirm stops at the next step (its lists are not used)
  if (abandoned.yes) return { lists, uploadCount: scope.length, chunkCount, vector, scope };

  // The dense search runs in the database while the other two are scored here from the scope's segments.
  // The database runs one statement at a time, in the order they were sent: the query's lexemes are asked
  // for before the dense search, so that the lexical side does not wait for it, and the graph side's entities
  // are matched while they come. With `prefetchRows`, the rows of the lexical list's head (and of the dense
  // list's) are then read in the database while the graph side's chunks are scored here: in most searches
  // they are the rows of the results, which the search would otherwise wait for after the fusion.
  const exact = options.exactDense ?? chunkCount <= EXACT_SCAN_MAX_CHUNKS;
  const lexicalQuery = methods.has('lexical') ? (early.lexicalQuery ?? askLexical(db, query)) : undefined;
  const dense = methods.has('dense') && vector ? repo.denseSearch(db, condition, vector, denseDepthFor(options.limit), exact) : undefined;
  dense?.catch(() => undefined); // awaited below; a failure is reported there, not as an unhandled rejection
  let denseList: Ranked[] | undefined;
  void dense?.then(
    (list) => (denseList = list),
    () => undefined,
  );
  let rows: Promise<repo.ChunkRow[]> | undefined;
  if (lexicalQuery || methods.has('kag')) {
    const segments = await ctx.searchIndex.segmentsOf(db, scope);
    const index = ctx.searchIndex;
    const where = methods.has('kag') && !abandoned.yes ? new NamePositions(segments, index) : undefined;
    const entities = where && graphEntities(index, where, query);
    if (lexicalQuery && !abandoned.yes) lists.lexical = await lexical(db, index, segments, condition, query, lexicalQuery, depth, chunkCount, lexTotal);
    if (options.prefetchRows && lists.lexical && !abandoned.yes) {
      await turn(); // the dense list, when the database has sent it
      rows = prefetchRows(db, lists.lexical, denseList ?? [], options.limit, vector);
      await turn(); // the statement is sent (drizzle's query starts when awaited)
    }
    if (where && entities && !abandoned.yes) lists.kag = graphChunks(where, entities, depth, chunkCount);
  }
  if (dense) lists.dense = await dense;
  return { lists, uploadCount: scope.length, chunkCount, vector, scope, rows };
}

/** The lexical side's statements that need no scope, sent together (before the scope and the dense search when the scope is held). */
interface LexicalQuery {
  lexemes: Promise<QueryLexeme[]>;
  /** for a query with quoted phrases or -exclusions: its websearch_to_tsquery as text */
  operators?: Promise<string>;
}

/** A quoted phrase or an -exclusion: websearch_to_tsquery's operators (the others, `or` and plain words, BM25 ranks as words). */
const OPERATORS = /["]|(^|\s)-\S/u;

function askLexical(db: DbOrTx, query: string): LexicalQuery {
  const lexemes = repo.queryLexemes(db, query);
  const operators = OPERATORS.test(query) ? repo.websearchQueryText(db, query) : undefined;
  // awaited by the ranking; a failure is reported there, not as an unhandled rejection
  lexemes.catch(() => undefined);
  operators?.catch(() => undefined);
  return { lexemes, operators };
}

/** `-word` and `-"a phrase"` at the start of the query or after a space: websearch_to_tsquery's exclusions. */
const EXCLUDED = /(?:^|\s)-("[^"]*"?|[^\s"]+)/gu;

/**
 * A query's -exclusions as one websearch query matching a text that holds any of them (`a or "b c"`), or undefined
 * without any. Read as websearch_to_tsquery reads them: `x-ray` excludes nothing, a lone `-` neither.
 */
export function exclusionsOf(query: string): string | undefined {
  const items = [...query.matchAll(EXCLUDED)].map((m) => m[1]!).filter((item) => /[\p{L}\p{N}]/u.test(item));
  return items.length > 0 ? items.join(' or ') : undefined;
}

/** One turn of the event loop: the replies that have come are taken in, the work queued is sent. */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * The rows of the chunks likely to be the first `limit` results: the lexical list's first limit + 10 (the
 * fusion's anchor) and the dense list's first `limit` when it is in already. On the first 60 Cranfield queries
 * at 100k chunks the lexical list's first 20 alone held 9.7 of the 10 results (all 10 in 101 of 121 searches),
 * and with the dense list's 4 searches of 60 had a row left to read after the fusion. A failed read is not an
 * error: the results' rows are then read after the fusion, as the others are.
 */
function prefetchRows(db: DbOrTx, lexical: readonly Ranked[], dense: readonly Ranked[], limit: number, vector: PackedVector | null): Promise<repo.ChunkRow[]> {
  const ids = new Set([...lexical.slice(0, limit + 10), ...dense.slice(0, limit)].map((r) => r.id));
  return repo.resultChunkRows(db, [...ids], vector).catch(() => []);
}

async function lexical(
  db: DbOrTx,
  index: SegmentCache,
  segments: Segment[],
  uploadIds: SQL,
  query: string,
  statements: LexicalQuery,
  k: number,
  n: number,
  lexTotal: number,
): Promise<Ranked[]> {
  const params = bm25Params(n, lexTotal);
  const lexemes = await statements.lexemes;
  // quoted phrases and -exclusions: only the chunks matching websearch_to_tsquery are ranked (found from the
  // copies; a query with a phrase needs positions, which only Postgres has)
  let allowed: Allowed | undefined;
  if (statements.operators) {
    const parsed = parseTsQuery(await statements.operators);
    allowed = parsed === undefined ? allowedOf(segments, await repo.websearchMatches(db, uploadIds, query)) : matching(segments, parsed);
  }
  const where = new TermPositions(segments);
  const rank = (terms: QueryLexeme[], depth: number) => bm25(segments, terms, depth, params, allowed, where);
  // the first pass only supplies RM3's feedback chunks (its best FB_DOCS) and the document frequencies: ranked
  // that deep, its top-k pruning skips more chunks, and its best FB_DOCS are the same as at any depth
  const first = rank(lexemes, FB_DOCS);
  // pg_trgm for misspelt names: query words unknown in scope are replaced by the closest name entity,
  // and the corrected query is the one that relevance feedback expands
  const corrected = await correctUnknown(db, index, segments, query, lexemes, first.df);
  const pass = corrected ? rank(corrected, FB_DOCS) : first;
  if (pass.hits.length === 0) return pass.hits;
  // RM3's expanded query, ranked 200 deep: the neighbour expansion orders that head again
  const expanded = feedback(corrected ?? lexemes, pass.hits);
  const second = rank(expanded, Math.max(k, EXPANSION.candidates));
  return expandNeighbours(second.hits, expanded, where, params, EXPANSION).slice(0, k);
}

/** The query's lexemes with those unknown in scope replaced by the lexemes of the closest name entities; undefined when nothing changes. */
async function correctUnknown(
  db: DbOrTx,
  index: SegmentCache,
  segments: Segment[],
  query: string,
  lexemes: QueryLexeme[],
  df: ReadonlyMap<string, number>,
): Promise<QueryLexeme[] | undefined> {
  if (lexemes.every((l) => df.has(l.lexeme))) return undefined;
  const words = [...query.toLowerCase().matchAll(/[\p{L}\p{N}][\p{L}\p{N}'’-]*/gu)].map((m) => m[0]).filter((w) => w.length >= 4);
  const corrections = words.flatMap((w) => index.similarEntities(segments, w, FUZZY_MIN, 1, NAME_KINDS));
  const extra = corrections.length > 0 ? await repo.queryLexemes(db, corrections.map((c) => c.name).join(' ')) : [];
  if (extra.length === 0) return undefined;
  const known = lexemes.filter((l) => df.has(l.lexeme));
  return [...known, ...extra.filter((e) => !known.some((k2) => k2.lexeme === e.lexeme))];
}

/** RM3 with the usual parameters (Lavrenko & Croft; Anserini's defaults): 10 feedback chunks, 10 terms, λ 0.5. */
const FB_DOCS = 10;
const FB_TERMS = 10;
const FB_LAMBDA = 0.5;

/**
 * Document expansion among the expanded query's first 200 hits (segments.ts, expandNeighbours), with
 * the parameters of Tao et al. (k 10 neighbours, α 0.5), not fitted to any collection.
 */
const EXPANSION: NeighbourExpansion = { candidates: 200, k: 10, alpha: 0.5 };

/**
 * Pseudo-relevance feedback: the first pass's top chunks supply expansion terms (relevance model),
 * mixed with the query (λ). Returns the weighted terms, which BM25 ranks with again.
 */
function feedback(lexemes: QueryLexeme[], hits: Located[]): QueryLexeme[] {
  const top = hits.slice(0, FB_DOCS).filter((h): h is Located & { segment: Segment; ord: number } => h.segment !== undefined && h.ord !== undefined);
  const sum = top.reduce((s, h) => s + h.score, 0) || 1;
  const terms = feedbackTerms(top.map((h) => ({ segment: h.segment, ord: h.ord, weight: h.score / sum })), FB_TERMS);
  const termSum = terms.reduce((s, t) => s + t.weight, 0) || 1;
  const qSum = lexemes.reduce((s, l) => s + l.qtf, 0) || 1;
  const weights = new Map<string, number>();
  for (const l of lexemes) weights.set(l.lexeme, (1 - FB_LAMBDA) * (l.qtf / qSum));
  for (const t of terms) weights.set(t.lexeme, (weights.get(t.lexeme) ?? 0) + FB_LAMBDA * (t.weight / termSum));
  return [...weights.entries()].map(([lexeme, qtf]) => ({ lexeme, qtf }));
}

/*
 * Knowledge-graph retrieval, in two steps (rankOver scores the lexical side between them). Matched entities e
 * (weight μ_e: 1 exact, the trigram similarity when fuzzy) and, one hop away, the strongest neighbours of each
 * (μ = decay · μ_seed · w_edge / w_max). A chunk scores Σ_e μ_e · ief(e) · (1 + ln tf), ief(e) = ln(1 + N / df_e)
 * over the scope's chunks.
 */

/** The graph side's first step: the query's entities matched in scope, exactly (μ 1) or by trigrams (μ the similarity). */
function graphEntities(index: SegmentCache, where: NamePositions, query: string): Map<string, number> {
  const { entities, words } = queryEntityCandidates(query);
  const names = entities.map((e) => e.name);
  const weight = new Map<string, number>();
  if (names.length + words.length === 0) return weight;
  for (const name of exactEntities(where, names, words)) weight.set(name, 1);
  const unmatched = names.filter((p) => !weight.has(p));
  // trigram-fuzzy: the best two entities of each phrase not matched exactly
  for (const phrase of unmatched) for (const r of index.similarEntities(where.segments, phrase, FUZZY_MIN, 2)) weight.set(r.name, Math.max(weight.get(r.name) ?? 0, r.sim));
  return weight;
}

/** The graph side's second step: one hop from the matched entities, and the chunks scored. */
function graphChunks(where: NamePositions, weight: Map<string, number>, k: number, n: number): Ranked[] {
  if (weight.size === 0) return [];
  const seeds = [...weight.keys()];
  const edges = neighbours(where, seeds, seeds.length * HOP_NEIGHBOURS * 4);
  const taken = new Map<string, number>();
  const maxW = Math.max(1, ...edges.map((e) => e.w));
  for (const e of edges) {
    for (const [seed, other] of [
      [e.a, e.b],
      [e.b, e.a],
    ] as const) {
      const mu = weight.get(seed);
      if (mu === undefined || weight.has(other) && (weight.get(other) ?? 0) >= 1) continue;
      const count = taken.get(seed) ?? 0;
      if (count >= HOP_NEIGHBOURS) continue;
      taken.set(seed, count + 1);
      const hop = HOP_DECAY * mu * (e.w / maxW);
      weight.set(other, Math.max(weight.get(other) ?? 0, hop));
    }
  }
  return entityScores(where, weight, n, k).map((h) => ({ id: h.id, score: h.score }));
}

/**
 * Which side found a chunk. The dense side ranks every chunk of a small scope, so "found by dense"
 * means a cosine of at least DENSE_FOUND of the query's best one; lexical and graph hits are matches.
 */
const DENSE_FOUND = 0.5;
function sourceOf(by: Partial<Record<Method, number>>): Source {
  const rag = (by.dense ?? 0) >= DENSE_FOUND || by.lexical !== undefined;
  if (by.kag === undefined) return 'rag';
  return rag ? 'fused' : 'kag';
}

export async function retrieve(ctx: AppContext, auth: AuthContext, query: string, options: RetrieveOptions): Promise<RetrieveResult> {
  const started = performance.now();
  const q = query.trim();
  const limit = Math.max(1, Math.min(100, Math.trunc(options.limit)));
  // a spread (one object a search, read a few times, not in a loop): written field by field, an option added later
  // would be dropped here without a type error
  const ranked = await rankLists(ctx, auth, q, { ...options, limit, prefetchRows: true });
  let fused = fuse(ranked.lists);
  // -exclusions hold for every side: the lexical side ranks only chunks without them (its websearch filter), and
  // a chunk the dense or the graph side found that holds an excluded word or phrase is no result either
  const excluding = exclusionsOf(q);
  if (excluding !== undefined && fused.length > 0) {
    const excluded = await repo.chunksMatching(ctx.db, fused.map((f) => f.id), excluding);
    if (excluded.size > 0) fused = fused.filter((f) => !excluded.has(f.id));
  }
  const totalScanned = fused.length;
  // minScore filters `rag` results on their dense cosine; kag and fused results are kept whatever it is.
  // The dense list carries the cosine of what it found; only lexical-only `rag` results need theirs read.
  let kept = fused;
  if (options.minScore !== undefined) {
    const min = options.minScore;
    const cosine = new Map((ranked.lists.dense ?? []).map((r) => [r.id, r.score]));
    if (ranked.vector !== null) {
      const missing = fused.filter((f) => sourceOf(f.by) === 'rag' && !cosine.has(f.id)).map((f) => f.id);
      for (const [id, score] of await repo.cosinesOf(ctx.db, missing, ranked.vector)) cosine.set(id, score);
    }
    kept = fused.filter((f) => sourceOf(f.by) !== 'rag' || (cosine.get(f.id) ?? 0) >= min);
  }
  // the texts and files of the first `limit`: the chunks' rows read ahead (rankOver) and the others', then their
  // files (those held at the versions the scope statement read are not read again: scopes.ts, UploadRowCache);
  // a chunk deleted before its row was read is passed over
  const ahead = new Map((ranked.rows ? await ranked.rows : []).map((r) => [r.id, r]));
  const details = new Map<string, repo.ResultChunk>();
  const top: typeof kept = [];
  const files = ctx.searchUploadRows.sourceFor(ranked.scope);
  for (let from = 0; top.length < limit && from < kept.length; ) {
    const batch = kept.slice(from, from + limit - top.length);
    from += batch.length;
    const read = await repo.resultChunkRows(ctx.db, batch.filter((f) => !ahead.has(f.id)).map((f) => f.id), ranked.vector);
    const rows = [...batch.flatMap((f) => ahead.get(f.id) ?? []), ...read];
    for (const c of await repo.withUploads(ctx.db, rows, files)) details.set(c.id, c);
    top.push(...batch.filter((f) => details.has(f.id)));
  }
  const terms = queryTerms(q);
  const results: SearchHit[] = [];
  for (const f of top) {
    const { upload: u, ...c } = details.get(f.id)!;
    results.push({
      uploadId: c.uploadId,
      chunkId: c.id,
      chunkIndex: c.index,
      text: c.text,
      snippet: snippetIsHidden(u) ? CONFIDENTIAL_SNIPPET : makeSnippet(c.text, terms),
      score: Math.round(Math.min(1, Math.max(0, f.score)) * 1e6) / 1e6,
      source: sourceOf(f.by),
      denseScore: c.dense === null ? null : Math.round(c.dense * 1e6) / 1e6,
      scores: f.by,
      upload: presentUpload(u),
    });
  }
  return { results, totalScanned, uploadCount: ranked.uploadCount, tookMs: Math.round((performance.now() - started) * 10) / 10 };
}
