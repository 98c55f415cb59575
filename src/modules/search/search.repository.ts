import { eq, sql, type SQL } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { chunks, systemState, uploads } from '../../db/schema.js';
import { textArray } from '../../db/search.js';
import type { UploadRow } from '../vault/uploads.repository.js';
import { EDGE_RANK, edgePairs, type Mention } from './graph.js';
import { vectorParam, type PackedVector } from './vectors.js';

/**
 * Every SQL statement about chunks, their vectors, their full-text index, their BM25 statistics and
 * the knowledge graph built from them: writes at ingestion, on chunk edit, re-embedding and delete,
 * and the reads of retrieval. The scope of a search is resolved first (search.policy decides it) into
 * a list of upload ids; every read here is restricted to that list. The lexical and graph sides read an
 * upload's rows once per version of its index (segments.ts); the dense side queries pgvector each time.
 *
 * A chunk's vector is in chunk_vectors (under the HNSW index) or, from ingestion until the background
 * drain moves it, in chunk_vectors_staged (compared exactly by every search): never in both.
 */

/** A chunk's BM25 length from its tsvector: its lexemes counted with repetition (a lexeme without positions counts once). */
const lexLength = (tsv: SQL) => sql`(select coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0) from unnest(${tsv}) t)::int`;


// ───────────── chunk writes ─────────────

export async function deleteChunksOf(tx: DbOrTx, uploadId: string): Promise<void> {
  await tx.delete(chunks).where(eq(chunks.uploadId, uploadId));
}

/** Removes everything indexed for an upload: chunks (their mentions cascade), graph rows, statistics. */
export async function removeUploadIndex(tx: DbOrTx, uploadId: string): Promise<void> {
  await tx.execute(sql`delete from chunks where upload_id = ${uploadId}`);
  await tx.execute(sql`delete from kg_edge_lists where upload_id = ${uploadId}`);
  await tx.execute(sql`delete from kg_entities where upload_id = ${uploadId}`);
  await tx.execute(sql`delete from upload_index_stats where upload_id = ${uploadId}`);
}

export interface ChunkToWrite {
  id: string;
  index: number;
  text: string;
  heading: string | null;
  tokens: number;
  /** The vector, in binary form (vectors.ts). */
  embedding: PackedVector;
  /** Its knowledge-graph entities when already found (ingestion finds them in its sandbox); else found on writing. */
  mentions?: Mention[];
}

/**
 * One statement for many chunks (single-row inserts into these indexed columns cost ~12 ms each on
 * PGlite): the chunk rows, with the tsvector and its BM25 length (lexemes counted with repetition)
 * computed in SQL from one to_tsvector call (`offset 0` keeps the planner from pulling the subquery up,
 * which copied the call into both uses: every text was parsed twice, a third of the statement), and their
 * vectors into chunk_vectors_staged. An incremental HNSW insert costs 3–7 ms a row on the embedded engine;
 * the drain (vector-drain.ts) pays it later, in small batches, while searches compare the staged vectors
 * exactly.
 */
export async function insertChunkBatch(tx: DbOrTx, uploadId: string, rows: ChunkToWrite[], now: Date): Promise<void> {
  if (rows.length === 0) return;
  const values = sql.join(
    rows.map((r) => sql`(${r.id}, ${String(r.index)}, ${r.text}, ${r.heading}, ${String(r.tokens)}, ${vectorParam(r.embedding)})`),
    sql`, `,
  );
  const at = now.toISOString();
  await tx.execute(sql`
    with v as (select * from (values ${values}) as v(id, idx, text, heading, tokens, embedding)),
    written as (
      insert into chunks (id, upload_id, chunk_index, text, heading, tokens, tsv, lex_len, created_at, updated_at)
      select v.id, ${uploadId}, v.idx::int, v.text, v.heading, v.tokens::int, x.tsv,
             ${lexLength(sql`x.tsv`)},
             ${at}::timestamptz, ${at}::timestamptz
        from v cross join lateral (select to_tsvector('english', v.text) as tsv offset 0) x)
    insert into chunk_vectors_staged (chunk_id, upload_id, embedding)
    select v.id, ${uploadId}, v.embedding from v`);
}

/** A Postgres int[] literal. */
const intArray = (values: readonly number[]) => `{${values.join(',')}}`;

/** Entity mentions of chunks: one row a chunk, its entities in order of salience (rank 1 first). */
export async function insertMentions(tx: DbOrTx, uploadId: string, rows: Array<{ chunkId: string; mentions: Mention[] }>): Promise<void> {
  const withAny = rows.filter((r) => r.mentions.length > 0);
  for (let i = 0; i < withAny.length; i += 500) {
    const values = sql.join(
      withAny.slice(i, i + 500).map(({ chunkId, mentions }) => {
        const ranked = [...mentions].sort((a, b) => a.rank - b.rank);
        return sql`(${chunkId}, ${textArray(ranked.map((m) => m.name))}, ${textArray(ranked.map((m) => m.kind))}, ${intArray(ranked.map((m) => m.tf))})`;
      }),
      sql`, `,
    );
    await tx.execute(sql`
      insert into kg_mentions (chunk_id, upload_id, names, kinds, tf)
      select v.chunk_id, ${uploadId}, v.names::text[], v.kinds::text[], v.tf::int[] from (values ${values}) as v(chunk_id, names, kinds, tf)
      on conflict (chunk_id) do nothing`);
  }
}

/**
 * The order of entity kinds when one name is found as several: a name or an acronym before a quantity
 * before a phrase, then by kind (a total order, as in graph.ts).
 */
const kindRank = (kind: SQL) => sql`(case ${kind} when 'phrase' then 2 when 'quantity' then 1 else 0 end, ${kind})`;

/**
 * The entities (kind by kindRank, chunk count) and co-occurrence edges (pairs among the EDGE_RANK most
 * salient entities of each chunk, a before b in code point order: the "C" collation, whatever the
 * database's; weight = chunks where both occur; stored as one list per a, its b in code point order) of
 * all the upload's chunks, from its stored mentions; graph.ts uploadGraph computes the same rows. `only`:
 * just these entities and the edge lists of these first entities `as` (the rows a chunk edit touches), by
 * the same formulas.
 */
async function insertGraphRowsFromMentions(tx: DbOrTx, uploadId: string, only?: { names: readonly string[]; as: readonly string[] }): Promise<void> {
  // restricted: only the chunks that name one of them can count towards these entities and edges
  const chunksNaming = (names: readonly string[] | undefined) => (names ? sql`and m.names && ${textArray(names)}::text[]` : sql``);
  const names = only ? sql`and e.name = any(${textArray(only.names)}::text[])` : sql``;
  await tx.execute(sql`
    insert into kg_entities (upload_id, name, kind, chunk_count)
    select ${uploadId}, e.name, (array_agg(e.kind order by ${kindRank(sql`e.kind`)}))[1], count(*)::int
      from kg_mentions m cross join lateral unnest(m.names, m.kinds) as e(name, kind)
     where m.upload_id = ${uploadId} ${chunksNaming(only?.names)} ${names} group by e.name`);
  if (only?.as.length === 0) return;
  const firsts = only ? sql`and p.a = any(${textArray(only.as)}::text[])` : sql``;
  await tx.execute(sql`
    insert into kg_edge_lists (upload_id, a, bs, ws)
    select ${uploadId}, e.a, array_agg(e.b order by e.b collate "C"), array_agg(e.w order by e.b collate "C")
      from (select p.a, p.b, count(*)::int as w
              from kg_mentions m cross join lateral (
                     select n1 as a, n2 as b from unnest(m.names[1:${EDGE_RANK}]) n1, unnest(m.names[1:${EDGE_RANK}]) n2 where n1 < n2 collate "C") p
             where m.upload_id = ${uploadId} ${chunksNaming(only?.as)} ${firsts}
             group by p.a, p.b) e
     group by e.a`);
}

/**
 * Ingestion: a slice of the upload's graph rows, computed in its sandbox (graph.ts uploadGraph, the
 * same rows as insertGraphRowsFromMentions): entities, and edge lists [a, its b's, their weights], each in
 * one plain insert of arrays. A large file's graph is written in many such short statements: the embedded
 * engine runs one statement at a time for the whole app, and one statement for the graph of a 10 MB file
 * held it ~4 s.
 */
export async function insertGraphRows(
  tx: DbOrTx,
  uploadId: string,
  rows: { entities: ReadonlyArray<readonly [string, string, number]>; edgeLists: ReadonlyArray<readonly [string, readonly string[], readonly number[]]> },
): Promise<void> {
  const { entities, edgeLists } = rows;
  if (entities.length > 0) {
    await tx.execute(sql`
      insert into kg_entities (upload_id, name, kind, chunk_count)
      select ${uploadId}, e.name, e.kind, e.n
        from unnest(${textArray(entities.map((e) => e[0]))}::text[], ${textArray(entities.map((e) => e[1]))}::text[], ${intArray(entities.map((e) => e[2]))}::int[]) as e(name, kind, n)`);
  }
  if (edgeLists.length > 0) {
    await tx.execute(sql`
      insert into kg_edge_lists (upload_id, a, bs, ws)
      select ${uploadId}, e.a, e.bs::text[], e.ws::int[]
        -- each list travels as the text of an array inside a text[], cast back to an array here
        from unnest(${textArray(edgeLists.map((e) => e[0]))}::text[], ${textArray(edgeLists.map((e) => textArray(e[1])))}::text[], ${textArray(edgeLists.map((e) => intArray(e[2])))}::text[]) as e(a, bs, ws)`);
  }
}

/**
 * The upload's BM25 statistics (chunks, Σ lex_len), recounted, with a new version: copies of the upload's
 * index held in memory (segments.ts) are valid only at the version they were read at. Every change of an
 * upload's chunks, mentions or graph rows ends here, in the same transaction.
 */
export async function refreshUploadStatistics(tx: DbOrTx, uploadId: string): Promise<void> {
  await tx.execute(sql`
    insert into upload_index_stats (upload_id, chunks, lex_len)
    select ${uploadId}, count(*)::int, coalesce(sum(lex_len), 0) from chunks where upload_id = ${uploadId}
    on conflict (upload_id) do update set chunks = excluded.chunks, lex_len = excluded.lex_len, version = nextval('upload_index_version')`);
}

/**
 * A chunk edit: the graph rows its old and new entities touch (their entities, and the whole edge list of
 * the first entity of each pair among the first EDGE_RANK of either), recomputed from the upload's stored mentions by the formulas of
 * insertGraphRowsFromMentions restricted to them; the rest of the upload's graph cannot have changed. A
 * 6,000-chunk file's whole graph takes seconds to recompute, in a transaction every query waits behind
 * on the embedded engine; this aggregates only the mentions of the chunks that name one of those entities
 * (the file's mention rows are still read through the upload_id index and filtered: `names` has no index).
 */
async function refreshGraphRowsOf(tx: DbOrTx, uploadId: string, oldNames: readonly string[], newNames: readonly string[]): Promise<void> {
  const names = [...new Set([...oldNames, ...newNames])];
  // the edge lists of every first entity of a touched pair, whole (the rest of each list may be unchanged)
  const as = [...new Set([...edgePairs(oldNames), ...edgePairs(newNames)].map((p) => p[0]))];
  await tx.execute(sql`delete from kg_entities where upload_id = ${uploadId} and name = any(${textArray(names)}::text[])`);
  if (as.length > 0) await tx.execute(sql`delete from kg_edge_lists where upload_id = ${uploadId} and a = any(${textArray(as)}::text[])`);
  await insertGraphRowsFromMentions(tx, uploadId, { names, as });
}

/**
 * Recomputes an upload's derived rows from all its chunks and mentions (regraph): the statistics with a
 * new version, then the entities and edges from scratch.
 */
export async function refreshUploadIndex(tx: DbOrTx, uploadId: string): Promise<void> {
  await refreshUploadStatistics(tx, uploadId);
  await tx.execute(sql`delete from kg_entities where upload_id = ${uploadId}`);
  await tx.execute(sql`delete from kg_edge_lists where upload_id = ${uploadId}`);
  await insertGraphRowsFromMentions(tx, uploadId);
}

export interface ChunkRecord {
  id: string;
  uploadId: string;
  index: number;
  text: string;
  tokens: number;
}

/**
 * Saves new text with its token count, vector (into chunk_vectors, replacing a staged one), full-text index, BM25 length
 * and entity mentions, moves the upload's text_tokens by the difference and recomputes the upload's
 * statistics and the graph rows the chunk's old and new entities touch. Run inside a transaction: all
 * of it changes together.
 */
export async function replaceChunkText(
  tx: DbOrTx,
  chunkId: string,
  text: string,
  tokens: number,
  vector: PackedVector,
  mentions: Mention[],
  now: Date,
): Promise<ChunkRecord | undefined> {
  const [old] = await rowsOf<{ upload_id: string; tokens: number }>(tx, sql`select upload_id, tokens from chunks where id = ${chunkId} for update`);
  if (!old) return undefined;
  const [row] = await rowsOf<{ id: string; upload_id: string; chunk_index: number; text: string; tokens: number }>(
    tx,
    sql`update chunks c
           set text = ${text}, tokens = ${tokens}, tsv = x.tsv,
               lex_len = ${lexLength(sql`x.tsv`)},
               updated_at = ${now.toISOString()}
          from (select to_tsvector('english', ${text}) as tsv offset 0) x
         where c.id = ${chunkId}
     returning c.id, c.upload_id, c.chunk_index, c.text, c.tokens`,
  );
  const delta = tokens - Number(old.tokens);
  if (delta !== 0) {
    await tx.execute(sql`update uploads set text_tokens = greatest(text_tokens + ${delta}, 0), updated_at = ${now.toISOString()} where id = ${old.upload_id}`);
  }
  // The chunk row is locked (for update, above): a drain skips the chunk from then on (drainStagedVectors),
  // and one that took it before holds a key-share lock on it, so the lock above waited for that drain to
  // commit. Either way the staged row is gone or free here, and the new vector wins.
  await tx.execute(sql`delete from chunk_vectors_staged where chunk_id = ${chunkId}`);
  await tx.execute(sql`
    insert into chunk_vectors (chunk_id, upload_id, embedding) values (${chunkId}, ${old.upload_id}, ${vectorParam(vector)})
    on conflict (chunk_id) do update set embedding = excluded.embedding`);
  const [before] = await rowsOf<{ names: string[] }>(tx, sql`select names from kg_mentions where chunk_id = ${chunkId}`);
  await tx.execute(sql`delete from kg_mentions where chunk_id = ${chunkId}`);
  await insertMentions(tx, old.upload_id, [{ chunkId, mentions }]);
  await refreshUploadStatistics(tx, old.upload_id);
  const after = [...mentions].sort((a, b) => a.rank - b.rank).map((m) => m.name);
  await refreshGraphRowsOf(tx, old.upload_id, before?.names ?? [], after);
  return row ? { id: row.id, uploadId: row.upload_id, index: Number(row.chunk_index), text: row.text, tokens: Number(row.tokens) } : undefined;
}

/** Chunks of uploads whose graph is to be rebuilt (regraph CLI), in id order after `afterId`. */
export async function chunkPageForGraph(db: DbOrTx, afterId: string, limit: number): Promise<Array<{ id: string; upload_id: string; text: string }>> {
  return rowsOf(db, sql`select id, upload_id, text from chunks where id > ${afterId} order by id limit ${limit}`);
}

export async function uploadsWithChunks(db: DbOrTx): Promise<string[]> {
  const rows = await rowsOf<{ upload_id: string }>(db, sql`select distinct upload_id from chunks`);
  return rows.map((r) => r.upload_id);
}

export async function clearMentionsOf(db: DbOrTx, uploadId: string): Promise<void> {
  await db.execute(sql`delete from kg_mentions where upload_id = ${uploadId}`);
}

export async function chunkTextsOfUpload(db: DbOrTx, uploadId: string): Promise<Array<{ id: string; text: string }>> {
  return rowsOf(db, sql`select id, text from chunks where upload_id = ${uploadId} order by chunk_index`);
}

// ───────────── retrieval reads ─────────────

export interface ScopeUpload {
  id: string;
  chunks: number;
  lexLen: number;
  /** version of the upload's index (null: none written) */
  version: number | null;
  /** version of the upload's row (its xmin): every update of the row changes it (scopes.ts, UploadRowCache) */
  row: string;
}

/** Uploads matching `condition` (built by search.policy: eligible, visible, of a searchable status), with their BM25 statistics and index version. */
export async function scopeUploads(db: DbOrTx, condition: ReturnType<typeof sql>): Promise<ScopeUpload[]> {
  const rows = await rowsOf<{ id: string; chunks: number; lex_len: number; version: number | string | null; row: string }>(
    db,
    sql`select u.id, coalesce(s.chunks, 0)::int as chunks, coalesce(s.lex_len, 0)::float8 as lex_len, s.version, u.xmin::text as row
          from uploads u left join upload_index_stats s on s.upload_id = u.id
         where ${condition}`,
  );
  return rows.map((r) => ({ id: r.id, chunks: Number(r.chunks), lexLen: Number(r.lex_len), version: r.version === null ? null : Number(r.version), row: r.row }));
}

/** Versions of the uploads' indexes (uploads without one are absent). */
export async function indexVersionsOf(db: DbOrTx, uploadIds: readonly string[]): Promise<Map<string, number>> {
  if (uploadIds.length === 0) return new Map();
  const rows = await rowsOf<{ upload_id: string; version: number | string }>(
    db,
    sql`select upload_id, version from upload_index_stats where upload_id = any(${textArray(uploadIds)}::text[])`,
  );
  return new Map(rows.map((r) => [r.upload_id, Number(r.version)]));
}

/**
 * A page of the uploads' chunks in (upload, chunk) order after `after`: each with its tsvector in text
 * form and its entity mentions as JSON text (`[[name, tf], …]`), one row per chunk (aggregated in SQL:
 * a row per mention costs the embedded engine three times as much).
 */
export async function chunkIndexPage(
  db: DbOrTx,
  uploadIds: readonly string[],
  after: { uploadId: string; index: number },
  limit: number,
): Promise<Array<{ id: string; uploadId: string; index: number; lexLen: number; tsv: string; mentions: string | null }>> {
  const rows = await rowsOf<{ id: string; upload_id: string; chunk_index: number; lex_len: number; tsv: string | null; mentions: string | null }>(
    db,
    sql`select c.id, c.upload_id, c.chunk_index, c.lex_len, c.tsv::text as tsv,
               (select json_agg(json_build_array(e.name, e.tf))::text from kg_mentions m cross join lateral unnest(m.names, m.tf) as e(name, tf)
                 where m.chunk_id = c.id) as mentions
          from chunks c
         where c.upload_id = any(${textArray(uploadIds)}::text[]) and (c.upload_id, c.chunk_index) > (${after.uploadId}, ${after.index})
         order by c.upload_id, c.chunk_index limit ${limit}`,
  );
  return rows.map((r) => ({ id: r.id, uploadId: r.upload_id, index: Number(r.chunk_index), lexLen: Number(r.lex_len), tsv: r.tsv ?? '', mentions: r.mentions }));
}

/**
 * A page of the uploads' entities in (upload, name) order after `after`: `[upload, name, kind]` each (sent as
 * one JSON text). Read in pages so that no one answer is a string of megabytes parsed in one go on the
 * request loop (a 10 MB file has ~70,000 entities).
 */
export async function entityPage(db: DbOrTx, uploadIds: readonly string[], after: { uploadId: string; name: string }, limit: number): Promise<Array<[string, string, string]>> {
  const [row] = await rowsOf<{ page: string | null }>(
    db,
    sql`select json_agg(json_build_array(p.upload_id, p.name, p.kind))::text as page from (
          select upload_id, name, kind from kg_entities
           where upload_id = any(${textArray(uploadIds)}::text[]) and (upload_id, name) > (${after.uploadId}, ${after.name})
           order by upload_id, name limit ${limit}) p`,
  );
  return row?.page ? (JSON.parse(row.page) as Array<[string, string, string]>) : [];
}

/**
 * A page of the uploads' co-occurrence edge lists in (upload, a) order after `after`: `[upload, a, its b's,
 * their weights]` each (as entityPage); `limit` lists.
 */
export async function edgeListPage(
  db: DbOrTx,
  uploadIds: readonly string[],
  after: { uploadId: string; a: string },
  limit: number,
): Promise<Array<[string, string, string[], number[]]>> {
  const [row] = await rowsOf<{ page: string | null }>(
    db,
    sql`select json_agg(json_build_array(p.upload_id, p.a, p.bs, p.ws))::text as page from (
          select upload_id, a, bs, ws from kg_edge_lists
           where upload_id = any(${textArray(uploadIds)}::text[]) and (upload_id, a) > (${after.uploadId}, ${after.a})
           order by upload_id, a limit ${limit}) p`,
  );
  return row?.page ? (JSON.parse(row.page) as Array<[string, string, string[], number[]]>) : [];
}

/** websearch_to_tsquery of a query in its text form (quoted phrases, -exclusions, or). */
export async function websearchQueryText(db: DbOrTx, query: string): Promise<string> {
  const [row] = await rowsOf<{ q: string }>(db, sql`select websearch_to_tsquery('english', ${query})::text as q`);
  return row?.q ?? '';
}

/** Chunks of the scope matching a websearch_to_tsquery (quoted phrases, -exclusions), through the GIN index. */
export async function websearchMatches(db: DbOrTx, scope: SQL, query: string): Promise<Set<string>> {
  const rows = await rowsOf<{ id: string }>(
    db,
    sql`select c.id from chunks c
         where c.upload_id in (select u.id from uploads u where ${scope}) and c.tsv @@ websearch_to_tsquery('english', ${query})`,
  );
  return new Set(rows.map((r) => r.id));
}

/** Of these chunks, the ones whose text matches a websearch_to_tsquery (a query's -exclusions), by primary key. */
export async function chunksMatching(db: DbOrTx, chunkIds: string[], query: string): Promise<Set<string>> {
  if (chunkIds.length === 0) return new Set();
  const rows = await rowsOf<{ id: string }>(
    db,
    sql`select id from chunks where id = any(${textArray(chunkIds)}::text[]) and tsv @@ websearch_to_tsquery('english', ${query})`,
  );
  return new Set(rows.map((r) => r.id));
}

export interface Scored {
  id: string;
  score: number;
}

/**
 * Dense top-k by cosine similarity within the uploads. `exact`: every vector of the scope is compared
 * (a MATERIALIZED scan the HNSW index cannot serve); else the HNSW index with iterative scanning, so a
 * filtered top-k is never short (pgvector ≥ 0.8), re-sorted because relaxed order may swap neighbours.
 * Either way the scope's staged vectors (not yet in the index) are compared exactly and merged in.
 */
export async function denseSearch(db: DbOrTx, scope: SQL, vector: PackedVector, k: number, exact: boolean): Promise<Scored[]> {
  const inScope = (alias: string) => sql`${sql.raw(alias)}.upload_id in (select u.id from uploads u where ${scope})`;
  const staged = sql`select s.chunk_id as id, s.embedding <=> (select v from q) as dist from chunk_vectors_staged s where ${inScope('s')}`;
  if (exact) {
    const rows = await rowsOf<{ id: string; score: number }>(
      db,
      sql`with q as materialized (select ${vectorParam(vector)} as v),
          d as materialized (
            ${staged}
            union all select e.chunk_id as id, e.embedding <=> (select v from q) as dist from chunk_vectors e where ${inScope('e')})
          select id, 1 - dist as score from d order by dist, id limit ${k}`,
    );
    return finiteScores(rows);
  }
  // The index scan's settings, local to this statement's transaction, in the statement itself: the scan is
  // the inner side of a lateral join on the settings row, so it starts after set_config ran (pgvector reads
  // them when the scan begins; test/search-segments.test.ts shows it). One statement instead of five (begin,
  // two `set local`, the query, commit): 1–2 ms less per search on the embedded engine. The query vector is
  // an init plan evaluated once; the index orders by its distance to it.
  const ef = String(Math.max(40, Math.min(1000, Math.trunc(k * 2))));
  const rows = await rowsOf<{ id: string; score: number }>(
    db,
    sql`with settings as materialized (
          select set_config('hnsw.iterative_scan', 'relaxed_order', true) as scan, set_config('hnsw.ef_search', ${ef}, true) as ef),
        q as materialized (select ${vectorParam(vector)} as v)
        select t.id, 1 - t.dist as score from (
          ${staged}
          union all
          select i.id, i.dist from settings cross join lateral (
            select e.chunk_id as id, e.embedding <=> (select v from q) as dist from chunk_vectors e
             where settings.ef is not null and ${inScope('e')}
             order by e.embedding <=> (select v from q) limit ${k}) i) t
        order by t.dist, t.id limit ${k}`,
  );
  return finiteScores(rows);
}

/**
 * A stored zero vector (the local embedder's for a chunk without letters or digits) has no cosine with
 * anything: pgvector answers NaN. Such rows are not similar to the query; they are left out.
 */
function finiteScores(rows: Array<{ id: string; score: number }>): Scored[] {
  return rows.map((r) => ({ id: r.id, score: Number(r.score) })).filter((r) => Number.isFinite(r.score));
}

/** A lexeme of a query and its weight there (its count in the query, or a weight RM3 gave it). */
export interface QueryLexeme {
  lexeme: string;
  qtf: number;
}

/** The query's lexemes (english configuration: stop words removed, Snowball stemming) with their frequency. */
export async function queryLexemes(db: DbOrTx, query: string): Promise<QueryLexeme[]> {
  const rows = await rowsOf<QueryLexeme>(
    db,
    sql`select t.lexeme, coalesce(array_length(t.positions, 1), 1)::int as qtf from unnest(to_tsvector('english', ${query})) t`,
  );
  return rows.map((r) => ({ lexeme: r.lexeme, qtf: Number(r.qtf) }));
}

export interface ResultChunk {
  id: string;
  uploadId: string;
  index: number;
  text: string;
  /** cosine similarity to the query vector (null without one, or for a chunk without a usable vector) */
  dense: number | null;
  upload: UploadRow;
}

/** Upload rows a caller already holds (retrieve: scopes.ts, UploadRowCache), each valid at the version of the row the caller expects. */
export interface UploadRowSource {
  /** The row held for this upload at the version expected, else undefined (it is read). */
  held(uploadId: string): UploadRow | undefined;
  /** A row just read, with its version (xmin). */
  remember(row: UploadRow, version: string): void;
}

/** A result chunk before its file is attached (resultChunkRows). */
export type ChunkRow = Omit<ResultChunk, 'upload'>;

/**
 * The chunks of results by id with their cosine similarity to the query vector, in one statement (in process
 * at 100k chunks about 0.6 ms, where a statement joining the four tables took 2.2). A chunk deleted by then
 * is absent.
 */
export async function resultChunkRows(db: DbOrTx, chunkIds: string[], vector: PackedVector | null): Promise<ChunkRow[]> {
  if (chunkIds.length === 0) return [];
  const dense = vector
    ? sql`1 - (coalesce((select s.embedding from chunk_vectors_staged s where s.chunk_id = c.id),
                        (select e.embedding from chunk_vectors e where e.chunk_id = c.id)) <=> ${vectorParam(vector)})`
    : sql`null::float8`;
  const rows = await rowsOf<{ id: string; upload_id: string; chunk_index: number; text: string; dense: number | string | null }>(
    db,
    sql`select c.id, c.upload_id, c.chunk_index, c.text, ${dense} as dense from chunks c where c.id = any(${textArray(chunkIds)}::text[])`,
  );
  return rows.map((r) => {
    const cosine = r.dense === null ? null : Number(r.dense);
    return { id: r.id, uploadId: r.upload_id, index: Number(r.chunk_index), text: r.text, dense: cosine === null || !Number.isFinite(cosine) ? null : cosine };
  });
}

/**
 * The chunks with their files: those `known` does not hold at the version expected are read by id, with their
 * row versions for the next search (0.5 ms for a few by id, 1.1 ms when found through the chunks in a
 * subquery). A chunk whose file is gone by then is left out, as one deleted before.
 */
export async function withUploads(db: DbOrTx, rows: readonly ChunkRow[], known: UploadRowSource): Promise<ResultChunk[]> {
  const byId = new Map<string, UploadRow>();
  const missing: string[] = [];
  for (const id of new Set(rows.map((r) => r.uploadId))) {
    const row = known.held(id);
    if (row) byId.set(id, row);
    else missing.push(id);
  }
  if (missing.length > 0) {
    const read = await db
      .select({ upload: uploads, version: sql<string>`${uploads}.xmin::text` })
      .from(uploads)
      .where(sql`${uploads.id} = any(${textArray(missing)}::text[])`);
    for (const { upload, version } of read) {
      byId.set(upload.id, upload);
      known.remember(upload, version);
    }
  }
  const out: ResultChunk[] = [];
  for (const r of rows) {
    const upload = byId.get(r.uploadId);
    // field by field, not { ...r, upload }: once V8 has optimized this, an object spread and given a new property gets a
    // shape (hidden class) of its own each time (retrieve.ts, bm25Params)
    if (upload !== undefined) out.push({ id: r.id, uploadId: r.uploadId, index: r.index, text: r.text, dense: r.dense, upload });
  }
  return out;
}

/** Cosine similarity of chunks to the query vector (chunks without a usable vector are absent). */
export async function cosinesOf(db: DbOrTx, chunkIds: string[], vector: PackedVector): Promise<Map<string, number>> {
  if (chunkIds.length === 0) return new Map();
  const ids = textArray(chunkIds);
  const rows = await rowsOf<{ id: string; score: number | string | null }>(
    db,
    sql`with q as materialized (select ${vectorParam(vector)} as v)
        select s.chunk_id as id, 1 - (s.embedding <=> (select v from q)) as score from chunk_vectors_staged s where s.chunk_id = any(${ids}::text[])
        union all
        select e.chunk_id, 1 - (e.embedding <=> (select v from q)) from chunk_vectors e where e.chunk_id = any(${ids}::text[])`,
  );
  return new Map(rows.map((r) => [r.id, Number(r.score)] as const).filter(([, v]) => Number.isFinite(v)));
}

// ───────────── embedder bookkeeping and re-embedding ─────────────

export interface EmbedderState {
  id: string;
  dimensions: number;
  /** false while a re-embed runs (or after one that did not finish) */
  complete: boolean;
}

const EMBEDDER_KEY = 'embedder';

function parseState(value: unknown): EmbedderState | undefined {
  const v = (typeof value === 'string' ? JSON.parse(value) : value) as Partial<EmbedderState> | null;
  if (!v || typeof v.id !== 'string') return undefined;
  return { id: v.id, dimensions: Number(v.dimensions ?? 0), complete: v.complete !== false };
}

/**
 * The recorded embedder. Inside a transaction `lock` holds the state row until it ends: 'share' for
 * writers of vectors that only need the embedder not to change meanwhile (they do not wait for each
 * other), 'update' for the one that changes it (re-embedding).
 */
export async function readEmbedderState(db: DbOrTx, options: { lock?: 'share' | 'update' } = {}): Promise<EmbedderState | undefined> {
  const query = db.select({ value: systemState.value }).from(systemState).where(eq(systemState.key, EMBEDDER_KEY));
  const [row] = options.lock ? await query.for(options.lock) : await query;
  return row ? parseState(row.value) : undefined;
}

/** Records the state when none exists yet; returns the state now stored. */
export async function recordEmbedderIfAbsent(db: DbOrTx, state: EmbedderState, now: Date): Promise<EmbedderState> {
  await db.insert(systemState).values({ key: EMBEDDER_KEY, value: state, updatedAt: now }).onConflictDoNothing();
  return (await readEmbedderState(db)) ?? state;
}

export async function writeEmbedderState(db: DbOrTx, state: EmbedderState, now: Date): Promise<void> {
  await db
    .insert(systemState)
    .values({ key: EMBEDDER_KEY, value: state, updatedAt: now })
    .onConflictDoUpdate({ target: systemState.key, set: { value: state, updatedAt: now } });
}

export async function countChunks(db: DbOrTx): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(chunks);
  return Number(row?.n ?? 0);
}

/** Dimension of the vector columns (pgvector keeps it in atttypmod; both tables always have the same). */
export async function embeddingColumnDimensions(db: DbOrTx): Promise<number> {
  const [row] = await rowsOf<{ dims: number }>(
    db,
    sql`select atttypmod as dims from pg_attribute where attrelid = 'chunk_vectors'::regclass and attname = 'embedding' and not attisdropped`,
  );
  return Number(row?.dims ?? -1);
}

/**
 * Serialises changes of the embedder bookkeeping and of the vector column across nodes (a transaction
 * advisory lock, held until the transaction ends): two nodes booting together never resize at once.
 */
export async function lockEmbedderChanges(tx: DbOrTx): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtext('vault-embedder'))`);
}

/**
 * Inside a transaction that changes the vector tables' index or columns: both tables locked at once,
 * before anything else touches them, in the order every other statement takes them (chunk_vectors_staged,
 * then chunk_vectors: the drain, searches, chunk edits), waiting at most VECTOR_LOCK_WAIT for them.
 * One writer still takes them the other way round: deleting chunks cascades to chunk_vectors before the
 * staged table (PostgreSQL's foreign-key triggers). Rather than meet it in a deadlock that PostgreSQL
 * breaks after a second by failing one of the two (perhaps the user's delete), this lock gives up first
 * (55P03): run the transaction through retryOnLockConflict.
 */
export async function lockVectorTables(tx: DbOrTx): Promise<void> {
  const [row] = await rowsOf<{ before: string }>(tx, sql`select current_setting('lock_timeout') as before, set_config('lock_timeout', ${VECTOR_LOCK_WAIT}, true) as set_to`);
  await tx.execute(sql`lock table chunk_vectors_staged, chunk_vectors in access exclusive mode`);
  await tx.execute(sql`select set_config('lock_timeout', ${row?.before ?? '0'}, true)`);
}

const VECTOR_LOCK_WAIT = '500ms';

/** Inside a transaction: the HNSW index dropped, the vector tables locked first (lockVectorTables). */
export async function dropEmbeddingIndex(tx: DbOrTx): Promise<void> {
  await lockVectorTables(tx);
  await tx.execute(sql`drop index if exists chunk_vectors_hnsw`);
}

export async function createEmbeddingIndex(db: DbOrTx): Promise<void> {
  await db.execute(sql`create index if not exists chunk_vectors_hnsw on chunk_vectors using hnsw (embedding vector_cosine_ops)`);
}

/**
 * In the transaction of dropEmbeddingIndex, after it (which locked both tables): removes every vector and
 * changes the columns' dimension (vectors of two sizes cannot share them).
 */
export async function resizeEmbeddingColumn(tx: DbOrTx, dimensions: number): Promise<void> {
  if (!Number.isInteger(dimensions) || dimensions < 1 || dimensions > 16000) throw new Error(`Invalid embedding dimension ${dimensions}`);
  await tx.execute(sql`delete from chunk_vectors`);
  await tx.execute(sql`delete from chunk_vectors_staged`);
  await tx.execute(sql.raw(`alter table chunk_vectors alter column embedding type vector(${dimensions})`));
  await tx.execute(sql.raw(`alter table chunk_vectors_staged alter column embedding type vector(${dimensions})`));
}

export async function chunkTextsAfter(db: DbOrTx, afterId: string, limit: number): Promise<Array<{ id: string; text: string }>> {
  return db
    .select({ id: chunks.id, text: chunks.text })
    .from(chunks)
    .where(sql`${chunks.id} > ${afterId}`)
    .orderBy(chunks.id)
    .limit(limit);
}

/**
 * Re-embedding: each chunk's new vector into chunk_vectors (the index is dropped meanwhile), replacing a
 * staged one, in one statement (a chunk is never left without a vector). `text` is the text the vector was
 * made from: a chunk edited since it was read keeps the vector of its edit (made from the new text), and
 * a chunk whose file was deleted meanwhile is left out (its row is locked for key share as it is read, so
 * a delete in progress is waited for instead of failing the foreign-key check and the whole re-embed).
 */
export async function updateChunkEmbeddings(db: DbOrTx, rows: Array<{ id: string; text: string; embedding: PackedVector }>): Promise<void> {
  if (rows.length === 0) return;
  const values = sql.join(
    rows.map((r) => sql`(${r.id}, ${r.text}, ${vectorParam(r.embedding)})`),
    sql`, `,
  );
  await db.execute(sql`
    with fresh as (
      select c.id, c.upload_id, v.embedding from (values ${values}) as v(id, text, embedding) join chunks c on c.id = v.id and c.text = v.text
         for key share of c),
    unstaged as (delete from chunk_vectors_staged s using fresh where s.chunk_id = fresh.id)
    insert into chunk_vectors (chunk_id, upload_id, embedding)
    select fresh.id, fresh.upload_id, fresh.embedding from fresh
    on conflict (chunk_id) do update set embedding = excluded.embedding`);
}

/**
 * Moves up to `limit` staged vectors (oldest chunks first) into chunk_vectors, paying their HNSW inserts;
 * returns how many left the staging table. A vector written to chunk_vectors meanwhile (a chunk edit, a
 * re-embed) is newer and stays. Several nodes may drain at once: each takes rows no other one holds.
 * Locks, taken up front and skipped when held by another transaction, so that no order of events can
 * deadlock (PostgreSQL; PGlite runs one statement at a time): the staged row (for update) and its chunk
 * row (for key share, what the insert's foreign-key check needs anyway). A chunk being edited (for update)
 * or deleted (its file removed) is left for a later batch; an edit or delete that comes after waits for
 * this statement's transaction instead of meeting it halfway.
 */
export async function drainStagedVectors(db: DbOrTx, limit: number, options: { lockTimeoutMs?: number; idleCheck?: boolean } = {}): Promise<number> {
  const { lockTimeoutMs, idleCheck = true } = options;
  // PostgreSQL: a re-embed's index build holds chunk_vectors for minutes; without a bound the statement
  // would wait as long, holding its rows (edits and deletes of those chunks would wait behind it) and a
  // shutdown waiting for it. A conflict fails it instead (55P03), and the drain comes back later.
  if (lockTimeoutMs !== undefined) {
    // the idle check first, one statement that no index build waits for: a transaction only with work to do
    // (skipped with idleCheck false: the caller's previous batch moved vectors, so more are likely waiting)
    if (idleCheck) {
      const [staged] = await rowsOf<{ any: boolean }>(db, sql`select exists (select 1 from chunk_vectors_staged) as any`);
      if (!staged?.any) return 0;
    }
    return db.transaction(async (tx) => {
      await tx.execute(sql`select set_config('lock_timeout', ${`${Math.max(1, Math.trunc(lockTimeoutMs))}ms`}, true)`);
      return drainStagedVectors(tx, limit);
    });
  }
  const [row] = await rowsOf<{ n: number }>(
    db,
    sql`with taken as (
          select s.chunk_id from chunk_vectors_staged s join chunks c on c.id = s.chunk_id
           order by s.chunk_id limit ${limit}
             for update of s skip locked
             for key share of c skip locked),
        moved as (
          delete from chunk_vectors_staged where chunk_id in (select chunk_id from taken)
          returning chunk_id, upload_id, embedding),
        kept as (
          insert into chunk_vectors (chunk_id, upload_id, embedding) select chunk_id, upload_id, embedding from moved
          on conflict (chunk_id) do nothing)
        select count(*)::int as n from moved`,
  );
  return Number(row?.n ?? 0);
}

export async function countStagedVectors(db: DbOrTx): Promise<number> {
  const [row] = await rowsOf<{ n: number }>(db, sql`select count(*)::int as n from chunk_vectors_staged`);
  return Number(row?.n ?? 0);
}

export async function setEmbeddingModelOfIndexedUploads(db: DbOrTx, model: string, now: Date): Promise<void> {
  await db.execute(sql`update uploads set embedding_model = ${model}, updated_at = ${now.toISOString()}::timestamptz where chunk_count > 0 and status <> 'deleted'`);
}
