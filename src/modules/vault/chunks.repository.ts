import { sql } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { newId } from '../../shared/ids.js';
import type { AuthContext } from '../identity/auth-context.js';
import { visibleCondition, type ScopedRecord } from './vault.policy.js';

export interface ChunkRow {
  id: string;
  uploadId: string;
  index: number;
  text: string;
  tokens: number;
}

/** The upload a chunk belongs to, with what the policy and the sanitize call need. */
export interface ChunkUpload extends ScopedRecord {
  id: string;
  status: string;
  isPrivate: boolean;
  /** The summary model override of the upload's institution, if any. */
  summaryModel: string | null;
}

interface RawChunkWithUpload {
  id: string;
  upload_id: string;
  chunk_index: number;
  text: string;
  tokens: number;
  u_scope: string;
  u_owner_user_id: string;
  u_institution_id: string | null;
  u_account_id: string;
  u_is_private: boolean;
  u_status: string;
  summary_model: string | null;
}

const uploadOf = (r: RawChunkWithUpload): ChunkUpload => ({
  id: r.upload_id,
  scope: r.u_scope,
  ownerUserId: r.u_owner_user_id,
  institutionId: r.u_institution_id,
  accountId: r.u_account_id,
  isPrivate: r.u_is_private,
  status: r.u_status,
  summaryModel: r.summary_model,
});

const chunkOf = (r: { id: string; upload_id: string; chunk_index: number; text: string; tokens: number }): ChunkRow => ({
  id: r.id,
  uploadId: r.upload_id,
  index: Number(r.chunk_index),
  text: r.text,
  tokens: Number(r.tokens),
});

/**
 * Chunks are readable only while their file is settled and usable: active, inactive or selected. Not
 * while it is 'processing' (large files on PGlite write their chunks in stages before the upload turns
 * active; a re-ingestion replaces them), not in 'error' (left-overs of an ingestion that died), and not
 * once it is 'deleted' (its chunks are removed in the delete's own transaction anyway).
 */
const readableFile = (alias: string) => sql`${sql.raw(`${alias}.status`)} in ('active', 'inactive', 'selected')`;

/** A chunk and its upload, when the caller can see the upload (chunks are as visible as their file) and it is readable. */
export async function findVisibleChunk(db: DbOrTx, auth: AuthContext, chunkId: string): Promise<{ chunk: ChunkRow; upload: ChunkUpload } | undefined> {
  const [row] = await rowsOf<RawChunkWithUpload>(
    db,
    sql`select ch.id, ch.upload_id, ch.chunk_index, ch.text, ch.tokens,
               u.scope as u_scope, u.owner_user_id as u_owner_user_id, u.institution_id as u_institution_id,
               u.account_id as u_account_id, u.is_private as u_is_private, u.status as u_status,
               i.summary_model
          from chunks ch
          join uploads u on u.id = ch.upload_id
          left join institutions i on i.id = u.institution_id
         where ch.id = ${chunkId} and ${readableFile('u')} and ${visibleCondition(auth, 'u', { hasPrivateFlag: true })}`,
  );
  return row ? { chunk: chunkOf(row), upload: uploadOf(row) } : undefined;
}

export async function isUploadVisible(db: DbOrTx, auth: AuthContext, uploadId: string): Promise<boolean> {
  const [row] = await rowsOf<{ id: string }>(db, sql`select u.id from uploads u where u.id = ${uploadId} and ${visibleCondition(auth, 'u', { hasPrivateFlag: true })}`);
  return Boolean(row);
}

/** One page of an upload's chunks in reading order, and how many there are (none while the file is not readable). */
export async function listChunks(db: DbOrTx, uploadId: string, offset: number, limit: number): Promise<{ rows: ChunkRow[]; total: number }> {
  const [count] = await rowsOf<{ n: number }>(
    db,
    sql`select count(*)::int as n from chunks ch join uploads u on u.id = ch.upload_id where ch.upload_id = ${uploadId} and ${readableFile('u')}`,
  );
  const rows = await rowsOf<{ id: string; upload_id: string; chunk_index: number; text: string; tokens: number }>(
    db,
    sql`select ch.id, ch.upload_id, ch.chunk_index, ch.text, ch.tokens
          from chunks ch join uploads u on u.id = ch.upload_id
         where ch.upload_id = ${uploadId} and ${readableFile('u')}
         order by ch.chunk_index, ch.id offset ${offset} limit ${limit}`,
  );
  return { rows: rows.map(chunkOf), total: Number(count?.n ?? 0) };
}

/**
 * Adds model tokens to the upload's counter in one atomic statement (never read-modify-write) that also writes
 * their ledger row (upload_token_ledger: who, on which chunk, with which model): no addition without its row.
 */
export async function addTokensUsed(db: DbOrTx, use: { uploadId: string; chunkId: string; userId: string; tokens: number; kind: 'sanitize'; model: string }): Promise<void> {
  await db.execute(
    sql`with added as (
          update uploads set tokens_used = tokens_used + ${use.tokens} where id = ${use.uploadId} returning id
        )
        insert into upload_token_ledger (id, upload_id, chunk_id, user_id, tokens, kind, model)
        select ${newId()}, added.id, ${use.chunkId}, ${use.userId}, ${use.tokens}, ${use.kind}, ${use.model || null} from added`,
  );
}
