import { sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import type { InvalidationChannel } from '../../platform/invalidation-channel.js';

/**
 * What makes cached auth data stale. `session`: one login session (logout, refresh-token reuse);
 * `user`: every session of a user (user row, password, status, role, memberships); `institution` /
 * `account`: every session whose user belongs to it or is a member of one of its institutions
 * (status, deletion); `all`: everything (a node may have missed events).
 */
export type AuthInvalidation =
  | { kind: 'session'; id: string }
  | { kind: 'user'; id: string }
  | { kind: 'institution'; id: string }
  | { kind: 'account'; id: string }
  | { kind: 'all' };

/** The cached shape: whatever the auth query loaded, plus the keys invalidation looks at. */
export interface CachedAuth<T> {
  value: T;
  userId: string;
  /** The user's account and the accounts of the institutions they are a member of. */
  accountIds: readonly string[];
  institutionIds: readonly string[];
}

interface Entry<T> extends CachedAuth<T> {
  /** When this entry stops being trusted without a new read (safety net, see AuthCacheOptions.ttlMs). */
  staleAt: number;
  /** lastActivityAt as known to this node (written or queued for writing). */
  activityAt: number;
  /** A background re-read is under way (the entry is past staleAt). */
  refreshing: boolean;
}

/**
 * An entry, field by field: `{ ...loaded, staleAt, activityAt }` would give every entry a hidden class of its own once V8
 * has optimized the code making it (search/retrieve.ts, bm25Params), and the reads of a request's entry would see as
 * many shapes as there are sessions.
 */
function entryOf<T>(loaded: CachedAuth<T>, staleAt: number, activityAt: number): Entry<T> {
  return { value: loaded.value, userId: loaded.userId, accountIds: loaded.accountIds, institutionIds: loaded.institutionIds, staleAt, activityAt, refreshing: false };
}

export interface AuthCacheOptions {
  /** Bound on the number of sessions kept; the least recently used goes first. */
  maxEntries: number;
  /**
   * How long an entry is trusted without a re-read. Every write this service makes invalidates at
   * once; the age bound only limits the damage of a write made outside it (a SQL console, a future
   * code path that forgot to publish). Past it, the entry is still served while one background
   * re-read replaces it (a request never waits for that read: on the embedded database it could sit
   * behind a long ingestion statement); past twice the TTL it is read again before answering.
   * 0 disables the cache.
   */
  ttlMs: number;
  channel: InvalidationChannel<AuthInvalidation>;
}

export interface AuthCacheStats {
  hits: number;
  misses: number;
  /** Background re-reads of entries past their TTL. */
  refreshes: number;
  /** Fills discarded because an invalidation happened while their query ran. */
  discardedFills: number;
  invalidations: number;
  evictions: number;
  size: number;
}

/**
 * A bounded in-process cache of the auth context, keyed by session id, filled on a miss.
 *
 * Correctness rests on three rules: (1) every code path that changes what an entry holds publishes
 * an invalidation on the channel after its write (services call `invalidate`), and the channel
 * delivers to this node synchronously; (2) a fill whose query began before an invalidation is not
 * stored (a generation counter), so a read racing a write cannot put the old data back; (3) expiry by
 * time is checked by the caller on every request from the cached `expiresAt`.
 */
export class AuthCache<T> {
  private readonly entries = new Map<string, Entry<T>>();
  private generation = 0;
  private readonly unsubscribe: () => void;
  readonly stats: Omit<AuthCacheStats, 'size'> = { hits: 0, misses: 0, refreshes: 0, discardedFills: 0, invalidations: 0, evictions: 0 };

  constructor(private readonly options: AuthCacheOptions) {
    this.unsubscribe = options.channel.subscribe((event) => this.apply(event));
  }

  get enabled(): boolean {
    return this.options.ttlMs > 0 && this.options.maxEntries > 0;
  }

  snapshotStats(): AuthCacheStats {
    return { ...this.stats, size: this.entries.size };
  }

  /**
   * The entry of a session, loading it on a miss. `load` returns undefined for an unknown session
   * (not cached: nothing to invalidate it by). Returns the entry so that the caller can track activity.
   */
  async get(sessionId: string, nowMs: number, load: () => Promise<CachedAuth<T> | undefined>): Promise<Entry<T> | undefined> {
    if (!this.enabled) {
      const loaded = await load();
      return loaded && entryOf(loaded, 0, Number.NEGATIVE_INFINITY);
    }
    const hit = this.entries.get(sessionId);
    if (hit && hit.staleAt + this.options.ttlMs > nowMs) {
      this.stats.hits++;
      // most recently used last: Map iteration order is the eviction order
      this.entries.delete(sessionId);
      this.entries.set(sessionId, hit);
      if (hit.staleAt <= nowMs && !hit.refreshing) this.refresh(sessionId, hit, nowMs, load);
      return hit;
    }
    this.stats.misses++;
    const generation = this.generation;
    const loaded = await load();
    if (!loaded) return undefined;
    const entry = entryOf(loaded, nowMs + this.options.ttlMs, Number.NEGATIVE_INFINITY);
    if (generation !== this.generation) {
      this.stats.discardedFills++;
      return entry;
    }
    this.entries.delete(sessionId);
    this.entries.set(sessionId, entry);
    while (this.entries.size > this.options.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
      this.stats.evictions++;
    }
    return entry;
  }

  /** Re-reads an entry past its TTL without making a request wait; replaces it unless invalidated meanwhile. */
  private refresh(sessionId: string, entry: Entry<T>, nowMs: number, load: () => Promise<CachedAuth<T> | undefined>): void {
    entry.refreshing = true;
    this.stats.refreshes++;
    const generation = this.generation;
    load().then(
      (loaded) => {
        if (this.entries.get(sessionId) !== entry) return; // invalidated or evicted meanwhile
        if (!loaded || generation !== this.generation) {
          this.entries.delete(sessionId);
          return;
        }
        this.entries.set(sessionId, entryOf(loaded, nowMs + this.options.ttlMs, entry.activityAt));
      },
      () => {
        if (this.entries.get(sessionId) === entry) this.entries.delete(sessionId); // the next request reads
      },
    );
  }

  /** Drops one entry on this node only (nothing changed: the caller just does not want it kept). */
  forget(sessionId: string): void {
    this.entries.delete(sessionId);
  }

  /** Publishes on the channel: applied here at once, and on every other node. */
  invalidate(event: AuthInvalidation): void {
    this.options.channel.publish(event);
  }

  invalidateSession(id: string): void {
    this.invalidate({ kind: 'session', id });
  }

  invalidateUser(id: string): void {
    this.invalidate({ kind: 'user', id });
  }

  invalidateInstitution(id: string): void {
    this.invalidate({ kind: 'institution', id });
  }

  invalidateAccount(id: string): void {
    this.invalidate({ kind: 'account', id });
  }

  /**
   * Calls `handler` with every invalidation (from this node or another), after this cache has applied
   * it: what holds a session longer than a request (a socket) checks it again there. Returns the unsubscribe.
   */
  onInvalidation(handler: (event: AuthInvalidation) => void): () => void {
    return this.options.channel.subscribe(handler);
  }

  close(): void {
    this.unsubscribe();
    this.entries.clear();
  }

  /** Drops what an event makes stale. Invalidations are rare admin acts: a scan of ≤ maxEntries is fine. */
  private apply(event: AuthInvalidation): void {
    this.generation++;
    this.stats.invalidations++;
    switch (event?.kind) {
      case 'session':
        this.entries.delete(event.id);
        return;
      case 'user':
        for (const [key, e] of this.entries) if (e.userId === event.id) this.entries.delete(key);
        return;
      case 'institution':
        for (const [key, e] of this.entries) if (e.institutionIds.includes(event.id)) this.entries.delete(key);
        return;
      case 'account':
        for (const [key, e] of this.entries) if (e.accountIds.includes(event.id)) this.entries.delete(key);
        return;
      default:
        // 'all', or an event this version does not know: the safe reading is "everything changed"
        this.entries.clear();
    }
  }
}

/**
 * `sessions.last_activity_at`, written off the request path: requests queue the time, and one
 * statement writes every queued session shortly after (and on close). Callers queue a session at
 * most once a minute, so the column is written at most that often.
 */
export class ActivityRecorder {
  private pending = new Map<string, Date>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Db,
    private readonly log: { error(obj: object, msg?: string): void },
    private readonly delayMs = 1000,
  ) {}

  get pendingCount(): number {
    return this.pending.size;
  }

  record(sessionId: string, at: Date): void {
    this.pending.set(sessionId, at);
    if (!this.timer) {
      this.timer = setTimeout(() => void this.flush(), this.delayMs);
      this.timer.unref();
    }
  }

  /** Writes what is queued; errors are logged (activity is advisory), never thrown at a request. */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    this.pending = new Map();
    this.flushing = this.flushing.then(async () => {
      if (batch.size === 0) return;
      const values = sql.join(
        [...batch].map(([id, at]) => sql`(${id}, ${at.toISOString()}::timestamptz)`),
        sql`, `,
      );
      try {
        await this.db.execute(
          sql`update sessions s set last_activity_at = v.at from (values ${values}) as v(id, at) where s.id = v.id and s.last_activity_at < v.at`,
        );
      } catch (err) {
        this.log.error({ err, sessions: batch.size }, 'could not record session activity');
      }
    });
    return this.flushing;
  }
}
