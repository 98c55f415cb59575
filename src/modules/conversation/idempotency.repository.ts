import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';

/** How long a key and its response are kept: a retry after that is a new request. */
export const IDEMPOTENCY_KEY_TTL_MS = 24 * 60 * 60 * 1000;

/** What a request's key found. */
export type KeyClaim =
  /** the key is this request's: answer, then complete or release it */
  | { state: 'claimed'; claimedAt: Date }
  /** a request with this key succeeded: its response, to send again */
  | { state: 'replay'; response: unknown }
  /** a request with this key is still running */
  | { state: 'running' }
  /** the key was used with a different request */
  | { state: 'mismatch' };

/** JSON with object keys sorted at every level: the same request gives the same text whatever the client's key order. */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** SHA-256 of what identifies a request for its key (callers leave out transport details such as the socket id). */
export const fingerprintOf = (request: unknown): string => createHash('sha256').update(canonicalJson(request)).digest('hex');

/**
 * Claims `key` for this request in one statement: a new key is inserted; a key whose request ran longer
 * than `staleBefore` allows (its process died) or whose response expired is taken over; any other key
 * is reported as it stands. Under concurrent claims the primary key admits one.
 */
export async function claimIdempotencyKey(db: DbOrTx, userId: string, key: string, fingerprint: string, now: Date, staleBefore: Date): Promise<KeyClaim> {
  const expiredBefore = new Date(now.getTime() - IDEMPOTENCY_KEY_TTL_MS);
  const [row] = await rowsOf<{ claimed: boolean; fingerprint: string | null; response: unknown; running: boolean | null }>(
    db,
    sql`with claimed as (
          insert into qanda_idempotency_keys as k (user_id, key, fingerprint, created_at)
          values (${userId}, ${key}, ${fingerprint}, ${now.toISOString()}::timestamptz)
          on conflict (user_id, key) do update set fingerprint = excluded.fingerprint, response = null, created_at = excluded.created_at
           where k.created_at < case when k.response is null then ${staleBefore.toISOString()}::timestamptz else ${expiredBefore.toISOString()}::timestamptz end
          returning 1
        )
        select exists (select 1 from claimed) as claimed, k.fingerprint, k.response, k.response is null as running
          from (select 1) one left join qanda_idempotency_keys k on k.user_id = ${userId} and k.key = ${key}`,
  );
  if (row?.claimed) return { state: 'claimed', claimedAt: now };
  // Not claimed and not visible: another request claimed it after this statement's snapshot was taken (Postgres, read committed).
  if (!row || row.fingerprint === null) return { state: 'running' };
  if (row.fingerprint !== fingerprint) return { state: 'mismatch' };
  return row.running ? { state: 'running' } : { state: 'replay', response: row.response };
}

/** Keeps the response of the request that claimed the key; called in the transaction that pays for the answer and saves it. */
export async function completeIdempotencyKey(db: DbOrTx, userId: string, key: string, claimedAt: Date, response: unknown): Promise<void> {
  await db.execute(
    sql`update qanda_idempotency_keys set response = ${JSON.stringify(response)}::jsonb
         where user_id = ${userId} and key = ${key} and created_at = ${claimedAt.toISOString()}::timestamptz and response is null`,
  );
}

/** Gives the key back after its request failed, so that a retry answers afresh (only the claim this request made). */
export async function releaseIdempotencyKey(db: DbOrTx, userId: string, key: string, claimedAt: Date): Promise<void> {
  await db.execute(
    sql`delete from qanda_idempotency_keys where user_id = ${userId} and key = ${key} and created_at = ${claimedAt.toISOString()}::timestamptz and response is null`,
  );
}

/** Deletes up to `limit` keys older than the TTL; returns how many. */
export async function deleteExpiredIdempotencyKeys(db: DbOrTx, now: Date, limit = 1000): Promise<number> {
  const rows = await rowsOf<{ user_id: string }>(
    db,
    sql`delete from qanda_idempotency_keys where (user_id, key) in (
          select user_id, key from qanda_idempotency_keys where created_at < ${new Date(now.getTime() - IDEMPOTENCY_KEY_TTL_MS).toISOString()}::timestamptz limit ${limit}
        ) returning user_id`,
  );
  return rows.length;
}
