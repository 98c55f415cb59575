import { and, desc, eq, sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { containsInsensitive, inList, textArray } from '../../db/search.js';
import { institutions, uploads } from '../../db/schema.js';
import { removeUploadIndex } from '../search/search.repository.js';
import { newId } from '../../shared/ids.js';
import { storableText } from '../../shared/storable-text.js';
import type { AuthContext } from '../identity/auth-context.js';
import type { FileStatusFilter } from './uploads.schemas.js';
import { visibleCondition, type VaultScope } from './vault.policy.js';

/** All SQL of upload records and their ingestion state. Chunks, vectors, text indexes and graph rows: search/search.repository.ts. */

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
  if (row) await removeUploadIndex(tx, id);
  return row;
}

/** The system_state entry naming this database to the file storage it owns (vault/orphan-files.ts storageOwnership). */
const STORAGE_OWNER_STATE = 'file_storage_owner';

/**
 * The id this database gives itself towards its file storage: made once (the first sweep of any node), the same
 * for every node on the database, and kept with the data (a backup restores it with the uploads' rows).
 */
export async function databaseStorageOwner(db: DbOrTx, now: Date): Promise<string> {
  const [row] = await rowsOf<{ id: string }>(
    db,
    sql`with made as (
          insert into system_state (key, value, updated_at) values (${STORAGE_OWNER_STATE}, jsonb_build_object('id', ${newId()}::text), ${now.toISOString()}::timestamptz)
          on conflict (key) do nothing
          returning value->>'id' as id
        )
        select id from made union all select value->>'id' from system_state where key = ${STORAGE_OWNER_STATE} limit 1`,
  );
  if (!row?.id) throw new Error(`system_state ${STORAGE_OWNER_STATE} holds no id`);
  return row.id;
}

/** Whether any upload row exists, whatever its status (a deleted file's row stays). */
export async function anyUploadRecorded(db: DbOrTx): Promise<boolean> {
  const [row] = await rowsOf<{ any: boolean }>(db, sql`select exists (select 1 from uploads) as any`);
  return row?.any === true;
}

/**
 * Of these storage keys, the ones an upload that is not deleted references: one statement (an index lookup
 * a key). A deleted upload's key is not counted: DELETE /api/user/files/{id} removes its bytes after the
 * commit, its download is a 404, and a deletion is never undone.
 */
export async function referencedStorageKeys(db: DbOrTx, keys: readonly string[]): Promise<Set<string>> {
  if (keys.length === 0) return new Set();
  const rows = await rowsOf<{ storage_key: string }>(
    db,
    sql`select storage_key from uploads where storage_key = any(${textArray(keys)}::text[]) and status <> 'deleted'`,
  );
  return new Set(rows.map((r) => r.storage_key));
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

/**
 * Ends an ingestion in 'error'. The message may quote the file (a parser's error): it is stored as
 * storableText makes it (no NUL or other control characters, at most 1,000 characters).
 */
export async function markIngestError(db: DbOrTx, id: string, message: string, now: Date): Promise<boolean> {
  const rows = await db
    .update(uploads)
    .set({ status: 'error', errorMessage: storableText(message), stage: 'failed', updatedAt: now })
    .where(and(eq(uploads.id, id), eq(uploads.status, 'processing')))
    .returning({ id: uploads.id });
  return rows.length > 0;
}

/** Locks the upload row inside the final ingestion transaction; returns its status. */
export async function lockUploadStatus(tx: DbOrTx, id: string): Promise<string | undefined> {
  const [row] = await tx.select({ status: uploads.status }).from(uploads).where(eq(uploads.id, id)).for('update');
  return row?.status;
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

