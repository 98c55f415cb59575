import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { rowsOf, type Db, type DbOrTx } from '../db/client.js';
import { AppError, badField } from '../shared/errors.js';

/**
 * Idempotency keys (the `Idempotency-Key` header) of the routes whose retry must not act twice: the Q&A
 * endpoints (an answer and its charge) and the credit movements (top-ups, transfers). A key a user sends
 * is claimed by one request; the response of a request that succeeded is saved with it in the commit that
 * makes its effect, and a retry with the same key and the same request gets that response again. A
 * retry while it runs is a 409; the same key with another request is a 400; a request that fails gives
 * its key back. Keys are per user and kept 24 hours.
 */

/** The response header that marks a replayed response. */
export const REPLAYED_HEADER = 'idempotent-replayed';

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

/** How deep a request keyed for idempotency may nest (the fingerprint walks it recursively): beyond, a 400. */
export const MAX_FINGERPRINT_DEPTH = 64;

/** JSON with object keys sorted at every level: the same request gives the same text whatever the client's key order. */
function canonicalJson(value: unknown, depth = 0): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (depth >= MAX_FINGERPRINT_DEPTH) throw new AppError(400, 'VALIDATION_FAILED', `A request with an Idempotency-Key may nest at most ${MAX_FINGERPRINT_DEPTH} levels deep`);
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v, depth + 1)).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v, depth + 1)}`).join(',')}}`;
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
          insert into idempotency_keys as k (user_id, key, fingerprint, created_at)
          values (${userId}, ${key}, ${fingerprint}, ${now.toISOString()}::timestamptz)
          on conflict (user_id, key) do update set fingerprint = excluded.fingerprint, response = null, created_at = excluded.created_at
           where k.created_at < case when k.response is null then ${staleBefore.toISOString()}::timestamptz else ${expiredBefore.toISOString()}::timestamptz end
          returning 1
        )
        select exists (select 1 from claimed) as claimed, k.fingerprint, k.response, k.response is null as running
          from (select 1) one left join idempotency_keys k on k.user_id = ${userId} and k.key = ${key}`,
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
    sql`update idempotency_keys set response = ${JSON.stringify(response)}::jsonb
         where user_id = ${userId} and key = ${key} and created_at = ${claimedAt.toISOString()}::timestamptz and response is null`,
  );
}

/** Gives the key back after its request failed, so that a retry answers afresh (only the claim this request made). */
export async function releaseIdempotencyKey(db: DbOrTx, userId: string, key: string, claimedAt: Date): Promise<void> {
  await db.execute(
    sql`delete from idempotency_keys where user_id = ${userId} and key = ${key} and created_at = ${claimedAt.toISOString()}::timestamptz and response is null`,
  );
}

/** Deletes up to `limit` keys older than the TTL; returns how many. */
export async function deleteExpiredIdempotencyKeys(db: DbOrTx, now: Date, limit = 1000): Promise<number> {
  const rows = await rowsOf<{ user_id: string }>(
    db,
    sql`delete from idempotency_keys where (user_id, key) in (
          select user_id, key from idempotency_keys where created_at < ${new Date(now.getTime() - IDEMPOTENCY_KEY_TTL_MS).toISOString()}::timestamptz limit ${limit}
        ) returning user_id`,
  );
  return rows.length;
}

/** Saves the response with the key, in the transaction that makes the request's effect. */
export interface KeyedRequest<T> {
  complete(tx: DbOrTx, response: T): Promise<void>;
}

export interface IdempotencyOptions {
  userId: string;
  /** The header's value; undefined runs the request without a key. */
  key: string | undefined;
  /** What identifies the request (route, target, body; not transport details): a retry must send the same. */
  request: unknown;
  /** A claim older than this whose request never finished is taken over (its process died). */
  staleMs: number;
  now: Date;
}

/**
 * Runs `run` under an idempotency key: a replay returns the saved response without running anything
 * (`replayed` true); `run` gets the means to save its response in its own transaction, and a failure
 * gives the key back before it is rethrown.
 */
export async function idempotent<T>(db: Db, options: IdempotencyOptions, run: (keyed: KeyedRequest<T> | null) => Promise<T>): Promise<{ response: T; replayed: boolean }> {
  const { userId, key, now } = options;
  if (key === undefined) return { response: await run(null), replayed: false };
  const claim = await claimIdempotencyKey(db, userId, key, fingerprintOf(options.request), now, new Date(now.getTime() - options.staleMs));
  switch (claim.state) {
    case 'mismatch':
      throw badField('Idempotency-Key', 'This Idempotency-Key was used with a different request; send a new key for a new request');
    case 'running':
      throw new AppError(409, 'CONFLICT', 'A request with this Idempotency-Key is still running; retry once it has finished', [], { 'Retry-After': '1' });
    case 'replay':
      return { response: claim.response as T, replayed: true };
  }
  try {
    return { response: await run({ complete: (tx, response) => completeIdempotencyKey(tx, userId, key, claim.claimedAt, response) }), replayed: false };
  } catch (err) {
    // a key left claimed is taken over once stale; a failure to give it back only delays the retry
    await releaseIdempotencyKey(db, userId, key, claim.claimedAt).catch(() => undefined);
    throw err;
  }
}
