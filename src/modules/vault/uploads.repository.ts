import { and, desc, eq, sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { containsInsensitive, inList } from '../../db/search.js';
import { chunks, institutions, systemState, uploads } from '../../db/schema.js';
import type { AuthContext } from '../identity/auth-context.js';
import type { FileStatusFilter } from './uploads.schemas.js';
import { visibleCondition, type VaultScope } from './vault.policy.js';

/** All SQL of uploads and their ingestion (chunk writes, embedder bookkeeping, re-embedding). */

export type UploadRow = typeof uploads.$inferSelect;
export type NewUpload = typeof uploads.$inferInsert;

const visibleUpload = (auth: AuthContext) => visibleCondition(auth, 'uploads', { hasPrivateFlag: true });

// ───────────── reads through the access policy ─────────────

/** `lock` (inside a transaction): the row stays locked FOR UPDATE until it ends (PATCH and DELETE of one file serialise). */
export async function findVisibleUpload(db: DbOrTx, auth: AuthContext, id: string, options: { lock?: boolean } = {}): Promise<UploadRow | undefined> {
  const query = db
    .select()
    .from(uploads)
    .where(and(eq(uploads.id, id), visibleUpload(auth)))
    .limit(1);
  const [row] = options.lock ? await query.for('update') : await query;
  return row;
}

/**
 * THE file-status filter (file list and select-all-ids), on the given status column: one status;
 * `excluded` = every status but selected and deleted; none = every status but deleted.
 */
export function fileStatusCondition(status: SQLWrapper, filter?: FileStatusFilter): SQL {
  if (filter === undefined) return sql`${status} <> 'deleted'`;
  if (filter === 'excluded') return sql`not ${inList(status, ['selected', 'deleted'])}`;
  return sql`${status} = ${filter}`;
}

export interface UploadListFilters {
  scope?: VaultScope;
  /** instance files of these institutions (scope instance) */
  institutionId?: string;
  /** account files of this account (scope account) */
  accountId?: string;
  /** a collection id, or null for the vault root */
  collectionId?: string | null;
  status?: FileStatusFilter;
  fileNameSearch?: string;
}

export async function listVisibleUploads(
  db: DbOrTx,
  auth: AuthContext,
  f: UploadListFilters,
  limit: number,
  offset: number,
): Promise<{ rows: UploadRow[]; total: number }> {
  const conds: SQL[] = [visibleUpload(auth)];
  if (f.scope) conds.push(sql`${uploads.scope} = ${f.scope}`);
  if (f.scope === 'instance' && f.institutionId) conds.push(sql`${uploads.institutionId} = ${f.institutionId}`);
  else if (f.scope === 'account' && f.accountId) conds.push(sql`${uploads.accountId} = ${f.accountId}`);
  else if (!f.scope && f.institutionId && f.accountId) {
    // your vault seen from this institution: your personal files, its instance files, its account's shared files
    conds.push(
      sql`(${uploads.scope} = 'personal' or (${uploads.scope} = 'instance' and ${uploads.institutionId} = ${f.institutionId}) or (${uploads.scope} = 'account' and ${uploads.accountId} = ${f.accountId}))`,
    );
  }
  if (f.collectionId === null) conds.push(sql`${uploads.collectionId} is null`);
  else if (f.collectionId !== undefined) conds.push(sql`${uploads.collectionId} = ${f.collectionId}`);
  conds.push(fileStatusCondition(uploads.status, f.status));
  if (f.fileNameSearch) conds.push(containsInsensitive(uploads.originalname, f.fileNameSearch));
  const where = and(...conds);
  const [count] = await db.select({ n: sql<number>`count(*)::int` }).from(uploads).where(where);
  const rows = await db
    .select()
    .from(uploads)
    .where(where)
    .orderBy(desc(uploads.createdAt), desc(uploads.id))
    .limit(limit)
    .offset(offset);
  return { rows, total: Number(count?.n ?? 0) };
}

// ───────────── writes of the upload routes ─────────────

export interface InstitutionLimits {
  id: string;
  accountId: string;
  maxFiles: number;
  disableFileUploadForUser: boolean;
}

/**
 * The institution's upload limits. With `lock`, the row is locked for the rest of the transaction:
 * concurrent uploads into one institution queue there, so the maxFiles count and the insert that
 * follows cannot interleave. Without, a cheap pre-check (the answer may change before the insert).
 */
export async function findInstitutionLimits(db: DbOrTx, id: string, options: { lock?: boolean } = {}): Promise<InstitutionLimits | undefined> {
  const query = db
    .select({ id: institutions.id, accountId: institutions.accountId, maxFiles: institutions.maxFiles, disableFileUploadForUser: institutions.disableFileUploadForUser })
    .from(institutions)
    .where(eq(institutions.id, id));
  const [row] = options.lock ? await query.for('update') : await query;
  return row;
}

/** Files that count against maxFiles: every non-deleted upload placed in the institution. */
export async function countInstitutionUploads(tx: DbOrTx, institutionId: string): Promise<number> {
  const [row] = await tx
    .select({ n: sql<number>`count(*)::int` })
    .from(uploads)
    .where(and(eq(uploads.institutionId, institutionId), sql`${uploads.status} <> 'deleted'`));
  return Number(row?.n ?? 0);
}

/**
 * Personal files of a user that are not deleted, and their bytes. `lock` (in a transaction) first locks
 * the user's row: concurrent uploads of one user then count one at a time.
 */
export async function personalUsage(db: DbOrTx, userId: string, options: { lock?: boolean } = {}): Promise<{ files: number; bytes: number }> {
  if (options.lock) await db.execute(sql`select id from users where id = ${userId} for update`);
  const [row] = await rowsOf<{ files: number; bytes: string | number }>(
    db,
    sql`select count(*)::int as files, coalesce(sum(${uploads.filesize}), 0)::bigint as bytes from ${uploads}
         where ${uploads.ownerUserId} = ${userId} and ${uploads.scope} = 'personal' and ${uploads.status} <> 'deleted'`,
  );
  return { files: Number(row?.files ?? 0), bytes: Number(row?.bytes ?? 0) };
}

export async function insertUpload(tx: DbOrTx, row: NewUpload): Promise<UploadRow> {
  const [created] = await tx.insert(uploads).values(row).returning();
  return created!;
}

/**
 * Updates a file that is not deleted (a delete that won the race is never undone); with `statusIn`,
 * only while its status is one of those. Undefined when no row matched.
 */
export async function updateUpload(db: DbOrTx, id: string, patch: Partial<NewUpload>, now: Date, options: { statusIn?: readonly string[] } = {}): Promise<UploadRow | undefined> {
  const [row] = await db
    .update(uploads)
    .set({ ...patch, updatedAt: now })
    .where(and(eq(uploads.id, id), sql`${uploads.status} <> 'deleted'`, options.statusIn ? inList(uploads.status, [...options.statusIn]) : undefined))
    .returning();
  return row;
}

/** Marks the upload deleted and removes its chunks (they leave every index with the row). Undefined when it was deleted already. */
export async function markDeleted(tx: DbOrTx, id: string, now: Date): Promise<UploadRow | undefined> {
  const [row] = await tx
    .update(uploads)
    .set({ status: 'deleted', chunkCount: 0, progress: 0, stage: 'deleted', updatedAt: now })
    .where(and(eq(uploads.id, id), sql`${uploads.status} <> 'deleted'`))
    .returning();
  if (row) await tx.delete(chunks).where(eq(chunks.uploadId, id));
  return row;
}

// ───────────── ingestion ─────────────

export async function findUploadById(db: DbOrTx, id: string): Promise<UploadRow | undefined> {
  const [row] = await db.select().from(uploads).where(eq(uploads.id, id)).limit(1);
  return row;
}

/** Progress is written only while the upload is still processing (a delete meanwhile wins). */
export async function setIngestProgress(db: DbOrTx, id: string, stage: string, progress: number, now: Date): Promise<boolean> {
  const rows = await db
    .update(uploads)
    .set({ stage, progress, updatedAt: now })
    .where(and(eq(uploads.id, id), eq(uploads.status, 'processing')))
    .returning({ id: uploads.id });
  return rows.length > 0;
}

export async function markIngestError(db: DbOrTx, id: string, message: string, now: Date): Promise<boolean> {
  const rows = await db
    .update(uploads)
    .set({ status: 'error', errorMessage: message, stage: 'failed', updatedAt: now })
    .where(and(eq(uploads.id, id), eq(uploads.status, 'processing')))
    .returning({ id: uploads.id });
  return rows.length > 0;
}

/** Locks the upload row inside the final ingestion transaction; returns its status. */
export async function lockUploadStatus(tx: DbOrTx, id: string): Promise<string | undefined> {
  const [row] = await tx.select({ status: uploads.status }).from(uploads).where(eq(uploads.id, id)).for('update');
  return row?.status;
}

export async function deleteChunksOf(tx: DbOrTx, uploadId: string): Promise<void> {
  await tx.delete(chunks).where(eq(chunks.uploadId, uploadId));
}

export interface ChunkToWrite {
  id: string;
  index: number;
  text: string;
  heading: string | null;
  tokens: number;
  /** pgvector text form: `[0.1,0.2,...]` */
  embedding: string;
}

/**
 * One multi-row INSERT for many chunks (single-row inserts into these indexed columns cost ~12 ms
 * each on PGlite). The vector is passed as text and cast; the tsvector is computed in SQL.
 */
export async function insertChunkBatch(tx: DbOrTx, uploadId: string, rows: ChunkToWrite[], now: Date): Promise<void> {
  if (rows.length === 0) return;
  const values = sql.join(
    rows.map((r) => sql`(${r.id}, ${String(r.index)}, ${r.text}, ${r.heading}, ${String(r.tokens)}, ${r.embedding})`),
    sql`, `,
  );
  const at = now.toISOString();
  await tx.execute(sql`
    insert into chunks (id, upload_id, chunk_index, text, heading, tokens, embedding, tsv, created_at, updated_at)
    select v.id, ${uploadId}, v.idx::int, v.text, v.heading, v.tokens::int, v.emb::vector, to_tsvector('english', v.text), ${at}::timestamptz, ${at}::timestamptz
      from (values ${values}) as v(id, idx, text, heading, tokens, emb)`);
}

export async function activateUpload(
  tx: DbOrTx,
  id: string,
  fields: { chunkCount: number; textTokens: number; pages: number | null; embeddingModel: string },
  now: Date,
): Promise<void> {
  await tx
    .update(uploads)
    .set({ status: 'active', errorMessage: null, stage: 'done', progress: 100, ...fields, updatedAt: now })
    .where(eq(uploads.id, id));
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
