import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import { rowsOf, type Db, type DbOrTx } from '../db/client.js';
import { textArray } from '../db/search.js';
import type { Clock } from '../shared/clock.js';
import { AppError, badField } from '../shared/errors.js';
import { newId } from '../shared/ids.js';

/**
 * Idempotency keys (the `Idempotency-Key` header) of the routes whose retry must not act twice: the Q&A
 * endpoints (an answer and its charge) and the credit movements (top-ups, transfers). A key a user sends
 * is claimed by one request; the response of a request that succeeded is saved with it in the commit that
 * makes its effect, and a retry with the same key and the same request gets that response again. A
 * retry while it runs is a 409; the same key with another request is a 400; a request that fails gives
 * its key back. Keys are per user and kept 24 hours.
 *
 * A running claim is a lease: the node whose request holds it renews it every IDEMPOTENCY_LEASE_RENEW_MS
 * (IdempotencyKeys, one statement for all the claims the node holds), until the request completes or gives
 * the key back. A claim whose lease lapsed (its holder silent for IDEMPOTENCY_LEASE_MS: its process died, or
 * cannot reach the database) is taken over by the next request with that key, which runs afresh; the caller
 * may undo, in the same transaction as the takeover, what the dead holder left (the Q&A releases its credit
 * reservation). A holder whose claim was taken over can neither complete it nor act under it: `hold` and
 * `complete` find the claim no longer its own (ClaimLostError) and the transaction that would have made its
 * effect rolls back.
 */

/** The response header that marks a replayed response. */
export const REPLAYED_HEADER = 'idempotent-replayed';

/** How long a key and its response are kept: a retry after that is a new request. */
export const IDEMPOTENCY_KEY_TTL_MS = 24 * 60 * 60 * 1000;

/** How often a node renews the leases of the claims its running requests hold. */
export const IDEMPOTENCY_LEASE_RENEW_MS = 15_000;
/** How long a claim is held without a renewal: three renewals missed, its holder is taken for dead and a retry takes the key over. */
export const IDEMPOTENCY_LEASE_MS = 3 * IDEMPOTENCY_LEASE_RENEW_MS;
/**
 * A running claim made before leases (no lease_until: by a node of the previous version during a rolling
 * deploy, which completes it by its created_at) is held as long as that version held a Q&A claim, the longest.
 */
const UNLEASED_CLAIM_MS = 2 * 60 * 60 * 1000;

/** A claim as its holder names it. */
export interface HeldClaim {
  userId: string;
  key: string;
  /** what the claim row's holder says: this request's id */
  holder: string;
}

/** What a request's key found. */
export type KeyClaim =
  /** the key is this request's: answer, then complete or release it; `tookOverFrom`: the holder whose lapsed lease it took over */
  | { state: 'claimed'; holder: string; tookOverFrom: string | null }
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

/** The claim is no longer the request's own: a retry took it over after its lease lapsed. Nothing it did under the claim may commit. */
export class ClaimLostError extends AppError {
  constructor() {
    super(409, 'CONFLICT', 'A retry with the same Idempotency-Key took this request over (its claim was not renewed in time); this request changed nothing');
    this.name = 'ClaimLostError';
  }
}

/** Runs in the takeover's transaction, with the holder whose lapsed claim is taken over: undoes what it left (its credit reservation). */
export type TakeoverHook = (tx: DbOrTx, previousHolder: string) => Promise<void>;

/**
 * Claims `key` for the request `holder`: a new key is inserted with a fresh lease (one statement). A key
 * that exists is locked and read: one whose lease lapsed (its holder went silent) or whose response expired
 * is taken over, with `onTakeover` for a lapsed running claim, in one transaction; any other key is reported
 * as it stands.
 */
export async function claimIdempotencyKey(
  db: Db,
  userId: string,
  key: string,
  fingerprint: string,
  holder: string,
  now: Date,
  onTakeover?: TakeoverHook,
): Promise<KeyClaim> {
  const at = now.toISOString();
  const leaseUntil = new Date(now.getTime() + IDEMPOTENCY_LEASE_MS).toISOString();
  const expiredBefore = new Date(now.getTime() - IDEMPOTENCY_KEY_TTL_MS).toISOString();
  // a key given back between the insert and the read is claimed again (a few times at most: then it is busy)
  for (let attempt = 0; attempt < 3; attempt++) {
    const inserted = await rowsOf(
      db,
      sql`insert into idempotency_keys (user_id, key, fingerprint, holder, lease_until, created_at)
          values (${userId}, ${key}, ${fingerprint}, ${holder}, ${leaseUntil}::timestamptz, ${at}::timestamptz)
          on conflict (user_id, key) do nothing returning 1 as one`,
    );
    if (inserted.length > 0) return { state: 'claimed', holder, tookOverFrom: null };
    const found = await db.transaction(async (tx): Promise<KeyClaim | undefined> => {
      const [row] = await rowsOf<{ fingerprint: string; response: unknown; running: boolean; holder: string | null; free: boolean }>(
        tx,
        sql`select fingerprint, response, response is null as running, holder,
                   case when response is null then coalesce(lease_until, created_at + ${UNLEASED_CLAIM_MS} * interval '1 millisecond') < ${at}::timestamptz
                        else created_at < ${expiredBefore}::timestamptz end as free
              from idempotency_keys where user_id = ${userId} and key = ${key} for update`,
      );
      if (!row) return undefined;
      if (!row.free) {
        if (row.fingerprint !== fingerprint) return { state: 'mismatch' };
        return row.running ? { state: 'running' } : { state: 'replay', response: row.response };
      }
      await tx.execute(
        sql`update idempotency_keys set fingerprint = ${fingerprint}, response = null, holder = ${holder}, lease_until = ${leaseUntil}::timestamptz, created_at = ${at}::timestamptz
             where user_id = ${userId} and key = ${key}`,
      );
      const previous = row.running ? row.holder : null;
      if (previous !== null && onTakeover) await onTakeover(tx, previous);
      return { state: 'claimed', holder, tookOverFrom: previous };
    });
    if (found) return found;
  }
  return { state: 'running' };
}

/** Renews the leases of the running claims `claims` (one statement); returns how many are still held (the others were taken over or ended). */
export async function renewIdempotencyLeases(db: DbOrTx, claims: readonly HeldClaim[], now: Date): Promise<number> {
  if (claims.length === 0) return 0;
  const rows = await rowsOf(
    db,
    sql`update idempotency_keys k set lease_until = ${new Date(now.getTime() + IDEMPOTENCY_LEASE_MS).toISOString()}::timestamptz
          from unnest(${textArray(claims.map((c) => c.userId))}::text[], ${textArray(claims.map((c) => c.key))}::text[], ${textArray(claims.map((c) => c.holder))}::text[]) as c(user_id, key, holder)
         where k.user_id = c.user_id and k.key = c.key and k.holder = c.holder and k.response is null
     returning 1 as one`,
  );
  return rows.length;
}

/**
 * Locks the claim in the caller's transaction if it is still this request's (else ClaimLostError): a takeover
 * waits for that transaction, and finds what it committed (call it first, before the rows the takeover also
 * changes: the same order as the takeover, so that the two never deadlock).
 */
export async function holdIdempotencyKey(db: DbOrTx, claim: HeldClaim): Promise<void> {
  const rows = await rowsOf(
    db,
    sql`select 1 as one from idempotency_keys where user_id = ${claim.userId} and key = ${claim.key} and holder = ${claim.holder} and response is null for update`,
  );
  if (rows.length === 0) throw new ClaimLostError();
}

/**
 * Keeps the response of the request that claimed the key; called in the transaction that pays for the answer and
 * saves it. A claim no longer this request's (taken over) is a ClaimLostError: that transaction must roll back.
 */
export async function completeIdempotencyKey(db: DbOrTx, claim: HeldClaim, response: unknown): Promise<void> {
  const rows = await rowsOf(
    db,
    sql`update idempotency_keys set response = ${JSON.stringify(response)}::jsonb, lease_until = null
         where user_id = ${claim.userId} and key = ${claim.key} and holder = ${claim.holder} and response is null
     returning 1 as one`,
  );
  if (rows.length === 0) throw new ClaimLostError();
}

/** Gives the key back after its request failed, so that a retry answers afresh (only the claim this request holds). */
export async function releaseIdempotencyKey(db: DbOrTx, claim: HeldClaim): Promise<void> {
  await db.execute(
    sql`delete from idempotency_keys where user_id = ${claim.userId} and key = ${claim.key} and holder = ${claim.holder} and response is null`,
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

/** What a request running under its key may do with the claim, in its own transactions. */
export interface KeyedRequest<T> {
  /** Locks the claim in `tx` if it is still this request's, else ClaimLostError: first in a transaction that moves credits for the request. */
  hold(tx: DbOrTx): Promise<void>;
  /** Saves the response with the key, in the transaction that makes the request's effect (ClaimLostError if taken over). */
  complete(tx: DbOrTx, response: T): Promise<void>;
}

export interface IdempotencyOptions {
  userId: string;
  /** The header's value; undefined runs the request without a key. */
  key: string | undefined;
  /** What identifies the request (route, target, body; not transport details): a retry must send the same. */
  request: unknown;
  /** This request's id as the claim names it (a Q&A request's history id); default a new id. */
  holder?: string;
  /** Runs in the transaction that takes over a claim whose holder went silent (see TakeoverHook). */
  onTakeover?: TakeoverHook;
}

/**
 * Runs requests under their idempotency keys, and keeps the leases of the claims this node's requests hold:
 * every IDEMPOTENCY_LEASE_RENEW_MS (from `start` to `stop`) one statement renews them all.
 */
export class IdempotencyKeys {
  private readonly held = new Map<string, HeldClaim>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: FastifyBaseLogger,
  ) {}

  start(): void {
    this.timer ??= setInterval(() => void this.renew(), IDEMPOTENCY_LEASE_RENEW_MS).unref();
  }

  /** Stops the renewals (after the requests drained: a claim still held lapses, and is taken over). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.queued;
    await this.running;
  }

  /**
   * Renews the lease of every claim this node's requests hold, as of the clock when the renewal starts: one
   * that starts after this call (one queued behind a renewal already running is shared).
   */
  renew(): Promise<void> {
    if (this.queued) return this.queued;
    const next: Promise<void> = (this.running ?? Promise.resolve())
      .then(() => {
        this.queued = undefined;
        this.running = next;
        return this.pass();
      })
      .finally(() => {
        if (this.running === next) this.running = undefined;
      });
    this.queued = next;
    return next;
  }

  private async pass(): Promise<void> {
    if (this.held.size === 0) return;
    try {
      await renewIdempotencyLeases(this.db, [...this.held.values()], this.clock.now());
    } catch (err) {
      this.log.warn({ err }, 'renewing the leases of running idempotency claims failed; trying again at the next renewal');
    }
  }

  /**
   * Runs `run` under an idempotency key: a replay returns the saved response without running anything
   * (`replayed` true); `run` gets the means to hold and complete the claim in its own transactions, the lease
   * is renewed while it runs, and a failure gives the key back before it is rethrown.
   */
  async run<T>(options: IdempotencyOptions, run: (keyed: KeyedRequest<T> | null) => Promise<T>): Promise<{ response: T; replayed: boolean }> {
    const { userId, key } = options;
    if (key === undefined) return { response: await run(null), replayed: false };
    const holder = options.holder ?? newId();
    const claim = await claimIdempotencyKey(this.db, userId, key, fingerprintOf(options.request), holder, this.clock.now(), options.onTakeover);
    switch (claim.state) {
      case 'mismatch':
        throw badField('Idempotency-Key', 'This Idempotency-Key was used with a different request; send a new key for a new request');
      case 'running':
        throw new AppError(409, 'CONFLICT', 'A request with this Idempotency-Key is still running; retry once it has finished', [], { 'Retry-After': '1' });
      case 'replay':
        return { response: claim.response as T, replayed: true };
    }
    const held: HeldClaim = { userId, key, holder };
    this.held.set(holder, held);
    try {
      return {
        response: await run({ hold: (tx) => holdIdempotencyKey(tx, held), complete: (tx, response) => completeIdempotencyKey(tx, held, response) }),
        replayed: false,
      };
    } catch (err) {
      // a key left claimed is taken over once its lease lapses; a failure to give it back only delays the retry
      await releaseIdempotencyKey(this.db, held).catch(() => undefined);
      throw err;
    } finally {
      this.held.delete(holder);
    }
  }
}
