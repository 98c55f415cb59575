import { eq, inArray, sql, type SQL } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { chunks, systemState, uploads } from '../../db/schema.js';
import type { UploadRow } from '../vault/uploads.repository.js';
import { EDGE_RANK, type Mention } from './graph.js';

/**
 * Every SQL statement about chunks, their vectors, their full-text index, their BM25 statistics and
 * the knowledge graph built from them: writes at ingestion, on chunk edit, re-embedding and delete,
 * and the reads of retrieval. The scope of a search is resolved first (search.policy decides it) into
 * a list of upload ids; every read here is restricted to that list. The lexical and graph sides read an
 * upload's rows once per version of its index (segments.ts); the dense side queries pgvector each time.
 */

/** A Postgres text[] literal (ids and entity names are passed as one array parameter). */
export function textArray(values: readonly string[]): string {
  return `{${values.map((v) => `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`).join(',')}}`;
}

// ───────────── chunk writes ─────────────

export async function deleteChunksOf(tx: DbOrTx, uploadId: string): Promise<void> {
  await tx.delete(chunks).where(eq(chunks.uploadId, uploadId));
}

/** Removes everything indexed for an upload: chunks (their mentions cascade), graph rows, statistics. */
export async function removeUploadIndex(tx: DbOrTx, uploadId: string): Promise<void> {
  await tx.execute(sql`delete from chunks where upload_id = ${uploadId}`);
  await tx.execute(sql`delete from kg_edges where upload_id = ${uploadId}`);
  await tx.execute(sql`delete from kg_entities where upload_id = ${uploadId}`);
  await tx.execute(sql`delete from upload_index_stats where upload_id = ${uploadId}`);
}

export interface ChunkToWrite {
  id: string;
  index: number;
  text: string;
  heading: string | null;
  tokens: number;
  /** pgvector text form: `[0.1,0.2,...]` */
  embedding: string;
  /** Its knowledge-graph entities when already found (ingestion finds them in its sandbox); else found on writing. */
  mentions?: Mention[];
}

/**
 * One multi-row INSERT for many chunks (single-row inserts into these indexed columns cost ~12 ms
 * each on PGlite). The vector is passed as text and cast; the tsvector and its BM25 length (lexemes
 * counted with repetition) are computed in SQL from one to_tsvector call.
 */
export async function insertChunkBatch(tx: DbOrTx, uploadId: string, rows: ChunkToWrite[], now: Date): Promise<void> {
  if (rows.length === 0) return;
  const values = sql.join(
    rows.map((r) => sql`(${r.id}, ${String(r.index)}, ${r.text}, ${r.heading}, ${String(r.tokens)}, ${r.embedding})`),
    sql`, `,
  );
  const at = now.toISOString();
  await tx.execute(sql`
    insert into chunks (id, upload_id, chunk_index, text, heading, tokens, embedding, tsv, lex_len, created_at, updated_at)
    select v.id, ${uploadId}, v.idx::int, v.text, v.heading, v.tokens::int, v.emb::vector, x.tsv,
           (select coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0) from unnest(x.tsv) t)::int,
           ${at}::timestamptz, ${at}::timestamptz
      from (values ${values}) as v(id, idx, text, heading, tokens, emb)
      cross join lateral (select to_tsvector('english', v.text) as tsv) x`);
}

/** Entity mentions of chunks, in multi-row inserts. */
export async function insertMentions(tx: DbOrTx, uploadId: string, rows: Array<{ chunkId: string; mentions: Mention[] }>): Promise<void> {
  const flat = rows.flatMap((r) => r.mentions.map((m) => ({ chunkId: r.chunkId, m })));
  for (let i = 0; i < flat.length; i += 1000) {
    const part = flat.slice(i, i + 1000);
    const values = sql.join(
      part.map(({ chunkId, m }) => sql`(${chunkId}, ${m.name}, ${m.kind}, ${String(m.tf)}, ${String(m.rank)})`),
      sql`, `,
    );
    await tx.execute(sql`
      insert into kg_mentions (chunk_id, upload_id, name, kind, tf, rank)
      select v.chunk_id, ${uploadId}, v.name, v.kind, v.tf::int, v.rank::int from (values ${values}) as v(chunk_id, name, kind, tf, rank)
      on conflict (chunk_id, name) do nothing`);
  }
}

/**
 * Recomputes an upload's derived rows from its chunks and mentions, in three set-based statements:
 * BM25 statistics (chunks, Σ lex_len), entities (kind by priority, chunk count) and co-occurrence edges
 * (pairs among the EDGE_RANK most salient entities of each chunk; weight = chunks where both occur).
 * The statistics row takes a new version: copies of the upload's index held in memory (segments.ts)
 * are valid only at the version they were read at. Every change of chunks or mentions ends here.
 */
export async function refreshUploadIndex(tx: DbOrTx, uploadId: string): Promise<void> {
  await tx.execute(sql`
    insert into upload_index_stats (upload_id, chunks, lex_len)
    select ${uploadId}, count(*)::int, coalesce(sum(lex_len), 0) from chunks where upload_id = ${uploadId}
    on conflict (upload_id) do update set chunks = excluded.chunks, lex_len = excluded.lex_len, version = nextval('upload_index_version')`);
  await tx.execute(sql`delete from kg_entities where upload_id = ${uploadId}`);
  await tx.execute(sql`
    insert into kg_entities (upload_id, name, kind, chunk_count)
    select upload_id, name, (array_agg(kind order by case kind when 'phrase' then 2 when 'quantity' then 1 else 0 end))[1], count(*)::int
      from kg_mentions where upload_id = ${uploadId} group by upload_id, name`);
  await tx.execute(sql`delete from kg_edges where upload_id = ${uploadId}`);
  await tx.execute(sql`
    insert into kg_edges (upload_id, a, b, weight)
    select m1.upload_id, m1.name, m2.name, count(*)::int
      from kg_mentions m1 join kg_mentions m2 on m2.chunk_id = m1.chunk_id and m1.name < m2.name
     where m1.upload_id = ${uploadId} and m1.rank <= ${EDGE_RANK} and m2.rank <= ${EDGE_RANK}
     group by m1.upload_id, m1.name, m2.name`);
}

export interface ChunkRecord {
  id: string;
  uploadId: string;
  index: number;
  text: string;
  tokens: number;
}

/**
 * Saves new text with its token count, vector (pgvector text form '[..]'), full-text index, BM25 length
 * and entity mentions, moves the upload's text_tokens by the difference and recomputes the upload's
 * derived rows. Run inside a transaction: all of it changes together.
 */
export async function replaceChunkText(
  tx: DbOrTx,
  chunkId: string,
  text: string,
  tokens: number,
  vectorText: string,
  mentions: Mention[],
  now: Date,
): Promise<ChunkRecord | undefined> {
  const [old] = await rowsOf<{ upload_id: string; tokens: number }>(tx, sql`select upload_id, tokens from chunks where id = ${chunkId} for update`);
  if (!old) return undefined;
  const [row] = await rowsOf<{ id: string; upload_id: string; chunk_index: number; text: string; tokens: number }>(
    tx,
    sql`update chunks c
           set text = ${text}, tokens = ${tokens}, embedding = ${vectorText}::vector, tsv = x.tsv,
               lex_len = (select coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0) from unnest(x.tsv) t)::int,
               updated_at = ${now.toISOString()}
          from (select to_tsvector('english', ${text}) as tsv) x
         where c.id = ${chunkId}
     returning c.id, c.upload_id, c.chunk_index, c.text, c.tokens`,
  );
  const delta = tokens - Number(old.tokens);
  if (delta !== 0) {
    await tx.execute(sql`update uploads set text_tokens = greatest(text_tokens + ${delta}, 0), updated_at = ${now.toISOString()} where id = ${old.upload_id}`);
  }
  await tx.execute(sql`delete from kg_mentions where chunk_id = ${chunkId}`);
  await insertMentions(tx, old.upload_id, [{ chunkId, mentions }]);
  await refreshUploadIndex(tx, old.upload_id);
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
}

/** Uploads matching `condition` (built by search.policy) that are active, with their BM25 statistics and index version. */
export async function scopeUploads(db: DbOrTx, condition: ReturnType<typeof sql>): Promise<ScopeUpload[]> {
  const rows = await rowsOf<{ id: string; chunks: number; lex_len: number; version: number | string | null }>(
    db,
    sql`select u.id, coalesce(s.chunks, 0)::int as chunks, coalesce(s.lex_len, 0)::float8 as lex_len, s.version
          from uploads u left join upload_index_stats s on s.upload_id = u.id
         where u.status = 'active' and ${condition}`,
  );
  return rows.map((r) => ({ id: r.id, chunks: Number(r.chunks), lexLen: Number(r.lex_len), version: r.version === null ? null : Number(r.version) }));
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
               (select json_agg(json_build_array(m.name, m.tf))::text from kg_mentions m where m.chunk_id = c.id) as mentions
          from chunks c
         where c.upload_id = any(${textArray(uploadIds)}::text[]) and (c.upload_id, c.chunk_index) > (${after.uploadId}, ${after.index})
         order by c.upload_id, c.chunk_index limit ${limit}`,
  );
  return rows.map((r) => ({ id: r.id, uploadId: r.upload_id, index: Number(r.chunk_index), lexLen: Number(r.lex_len), tsv: r.tsv ?? '', mentions: r.mentions }));
}

/** Each upload's entities as JSON text `[[name, kind], …]`. */
export async function entitiesOf(db: DbOrTx, uploadIds: readonly string[]): Promise<Array<{ uploadId: string; entities: string }>> {
  const rows = await rowsOf<{ upload_id: string; entities: string }>(
    db,
    sql`select upload_id, json_agg(json_build_array(name, kind))::text as entities from kg_entities
         where upload_id = any(${textArray(uploadIds)}::text[]) group by upload_id`,
  );
  return rows.map((r) => ({ uploadId: r.upload_id, entities: r.entities }));
}

/** Each upload's co-occurrence edges as JSON text `[[a, b, weight], …]`. */
export async function edgesOf(db: DbOrTx, uploadIds: readonly string[]): Promise<Array<{ uploadId: string; edges: string }>> {
  const rows = await rowsOf<{ upload_id: string; edges: string }>(
    db,
    sql`select upload_id, json_agg(json_build_array(a, b, weight))::text as edges from kg_edges
         where upload_id = any(${textArray(uploadIds)}::text[]) group by upload_id`,
  );
  return rows.map((r) => ({ uploadId: r.upload_id, edges: r.edges }));
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

export interface Scored {
  id: string;
  score: number;
}

/**
 * Dense top-k by cosine similarity within the uploads. `exact`: every vector of the scope is compared
 * (a MATERIALIZED scan the HNSW index cannot serve); else the HNSW index with iterative scanning, so a
 * filtered top-k is never short (pgvector ≥ 0.8), re-sorted because relaxed order may swap neighbours.
 */
export async function denseSearch(db: DbOrTx, scope: SQL, vector: string, k: number, exact: boolean): Promise<Scored[]> {
  if (exact) {
    const rows = await rowsOf<{ id: string; score: number }>(
      db,
      sql`with d as materialized (
            select c.id, c.embedding <=> ${vector}::vector as dist from chunks c
             where c.upload_id in (select u.id from uploads u where ${scope}) and c.embedding is not null)
          select id, 1 - dist as score from d order by dist, id limit ${k}`,
    );
    return finiteScores(rows);
  }
  // The index scan's settings, local to this statement's transaction, in the statement itself: the scan is
  // the inner side of a lateral join on the settings row, so it starts after set_config ran (pgvector reads
  // them when the scan begins; test/search-segments.test.ts shows it). One statement instead of five (begin,
  // two `set local`, the query, commit): 1–2 ms less per search on the embedded engine.
  const ef = String(Math.max(40, Math.min(1000, Math.trunc(k * 2))));
  const rows = await rowsOf<{ id: string; score: number }>(
    db,
    sql`with settings as materialized (
          select set_config('hnsw.iterative_scan', 'relaxed_order', true) as scan, set_config('hnsw.ef_search', ${ef}, true) as ef)
        select t.id, t.score from settings cross join lateral (
          select c.id, 1 - (c.embedding <=> ${vector}::vector) as score from chunks c
           where settings.ef is not null and c.upload_id in (select u.id from uploads u where ${scope}) and c.embedding is not null
           order by c.embedding <=> ${vector}::vector limit ${k}) t
        order by t.score desc, t.id`,
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

/** The query's lexemes (english configuration: stop words removed, Snowball stemming) with their frequency. */
export async function queryLexemes(db: DbOrTx, query: string): Promise<Array<{ lexeme: string; qtf: number }>> {
  const rows = await rowsOf<{ lexeme: string; qtf: number }>(
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

/** The chunks of the final results with their files, and their cosine similarity to the query vector, in one query. */
export async function resultChunks(db: DbOrTx, chunkIds: string[], vector: string | null): Promise<ResultChunk[]> {
  if (chunkIds.length === 0) return [];
  const dense = vector ? sql<number | null>`1 - (${chunks.embedding} <=> ${vector}::vector)` : sql<number | null>`null::float8`;
  const rows = await db
    .select({ id: chunks.id, uploadId: chunks.uploadId, index: chunks.chunkIndex, text: chunks.text, dense: dense.mapWith(Number), upload: uploads })
    .from(chunks)
    .innerJoin(uploads, eq(uploads.id, chunks.uploadId))
    .where(inArray(chunks.id, chunkIds));
  return rows.map((r) => ({ ...r, dense: r.dense === null || !Number.isFinite(r.dense) ? null : r.dense }));
}

/** Cosine similarity of chunks to the query vector (chunks without a usable vector are absent). */
export async function cosinesOf(db: DbOrTx, chunkIds: string[], vector: string): Promise<Map<string, number>> {
  if (chunkIds.length === 0) return new Map();
  const rows = await rowsOf<{ id: string; score: number | string | null }>(
    db,
    sql`select c.id, 1 - (c.embedding <=> ${vector}::vector) as score from chunks c where c.id = any(${textArray(chunkIds)}::text[])`,
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

/** Dimension of the chunks.embedding column (pgvector keeps it in atttypmod). */
export async function embeddingColumnDimensions(db: DbOrTx): Promise<number> {
  const [row] = await rowsOf<{ dims: number }>(
    db,
    sql`select atttypmod as dims from pg_attribute where attrelid = 'chunks'::regclass and attname = 'embedding' and not attisdropped`,
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

export async function dropEmbeddingIndex(tx: DbOrTx): Promise<void> {
  await tx.execute(sql`drop index if exists chunks_embedding_hnsw`);
}

export async function createEmbeddingIndex(db: DbOrTx): Promise<void> {
  await db.execute(sql`create index if not exists chunks_embedding_hnsw on chunks using hnsw (embedding vector_cosine_ops)`);
}

/** Empties every vector and changes the column's dimension (vectors of two sizes cannot share it). */
export async function resizeEmbeddingColumn(tx: DbOrTx, dimensions: number): Promise<void> {
  if (!Number.isInteger(dimensions) || dimensions < 1 || dimensions > 16000) throw new Error(`Invalid embedding dimension ${dimensions}`);
  await tx.execute(sql`update chunks set embedding = null where embedding is not null`);
  await tx.execute(sql.raw(`alter table chunks alter column embedding type vector(${dimensions})`));
}

export async function chunkTextsAfter(db: DbOrTx, afterId: string, limit: number): Promise<Array<{ id: string; text: string }>> {
  return db
    .select({ id: chunks.id, text: chunks.text })
    .from(chunks)
    .where(sql`${chunks.id} > ${afterId}`)
    .orderBy(chunks.id)
    .limit(limit);
}

export async function updateChunkEmbeddings(db: DbOrTx, rows: Array<{ id: string; embedding: string }>, now: Date): Promise<void> {
  if (rows.length === 0) return;
  const values = sql.join(
    rows.map((r) => sql`(${r.id}, ${r.embedding})`),
    sql`, `,
  );
  await db.execute(sql`
    update chunks c set embedding = v.emb::vector, updated_at = ${now.toISOString()}::timestamptz
      from (values ${values}) as v(id, emb)
     where c.id = v.id`);
}

export async function setEmbeddingModelOfIndexedUploads(db: DbOrTx, model: string, now: Date): Promise<void> {
  await db.execute(sql`update uploads set embedding_model = ${model}, updated_at = ${now.toISOString()}::timestamptz where chunk_count > 0 and status <> 'deleted'`);
}
