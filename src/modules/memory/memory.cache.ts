import { ALL_RECORDS, type InvalidationBus } from '../../platform/invalidation.js';
import type { Clock } from '../../shared/clock.js';
import { LoadsInFlight } from '../../shared/loads-in-flight.js';
import type { MemoryWithInstitution } from './memory.repository.js';

/**
 * In-process cache of memory rows for GET /api/user/memory: the personal rows of each author and the
 * shared rows of each institution, as loaded from the database (not as presented: editable and isAuthor
 * are the caller's and are computed per request). Which institutions a caller reads comes from its
 * authenticated context, so membership changes need no invalidation here.
 *
 * Invalidation goes through the bus, so that a Redis-backed bus reaches every node:
 * - memory-personal (author id) and memory-shared (institution id): published by every memory write;
 * - institution: its name/ainame/picture are part of the shared rows, and deleting it deletes them;
 * - user: deleting a user deletes the shared rows they wrote anywhere: every shared entry goes.
 * A load that started before an invalidation does not store its result (generation counter). Misses of one
 * key share the load in flight (one read for a burst of requests), unless an invalidation came after it
 * started. A list is read again after maxAgeMs whatever happened. Bounded by the number of rows held
 * (200,000 by default; an empty list counts as one), the oldest entries going first.
 */
type Rows = readonly MemoryWithInstitution[];
/** A cached list and when it was read (ms). */
interface Held {
  rows: Rows;
  at: number;
}

export class MemoryCache {
  private readonly personal = new Map<string, Held>();
  private readonly shared = new Map<string, Held>();
  private readonly personalLoads = new LoadsInFlight<Rows>();
  private readonly sharedLoads = new LoadsInFlight<Rows>();
  private generation = 0;
  private readonly unsubscribers: Array<() => void>;

  /** Rows held across both maps; entries are evicted oldest first beyond `maxRows`. */
  private rowCount = 0;

  private readonly maxRows: number;
  /**
   * How long a list is served without reading it again (default 5 minutes). Invalidation takes effect at
   * once; this bounds what a lost one could leave (a subscriber that died silently).
   */
  private readonly maxAgeMs: number;

  constructor(
    bus: InvalidationBus,
    private readonly clock: Clock,
    options: { maxRows?: number; maxAgeMs?: number } = {},
  ) {
    this.maxRows = options.maxRows ?? 200_000;
    this.maxAgeMs = options.maxAgeMs ?? 5 * 60_000;
    this.unsubscribers = [
      bus.subscribe('memory-personal', ({ id }) => this.drop(this.personal, id)),
      bus.subscribe('memory-shared', ({ id }) => this.drop(this.shared, id)),
      bus.subscribe('institution', ({ id }) => this.drop(this.shared, id)),
      bus.subscribe('user', ({ id }) => {
        this.drop(this.personal, id);
        this.drop(this.shared, ALL_RECORDS);
      }),
    ];
  }

  close(): void {
    for (const u of this.unsubscribers) u();
  }

  /**
   * An author's personal rows: the cached list itself on a hit (no promise: the list route answers from
   * hits alone without a turn of the microtask queue), else the load (shared with the misses in flight).
   * A cached list is never changed in place: a change replaces it, so its identity tells it apart.
   */
  personalOf(userId: string, load: () => Promise<MemoryWithInstitution[]>): Rows | Promise<Rows> {
    return this.get(this.personal, this.personalLoads, userId, load);
  }

  /** An institution's shared rows, as personalOf. */
  sharedOf(institutionId: string, load: () => Promise<MemoryWithInstitution[]>): Rows | Promise<Rows> {
    return this.get(this.shared, this.sharedLoads, institutionId, load);
  }

  private get(map: Map<string, Held>, loads: LoadsInFlight<Rows>, key: string, load: () => Promise<MemoryWithInstitution[]>): Rows | Promise<Rows> {
    const hit = map.get(key);
    const at = this.clock.now().getTime();
    if (hit && at - hit.at < this.maxAgeMs) return hit.rows;
    const generation = this.generation;
    return loads.join(key, generation, () => this.fill(map, key, load, generation, at));
  }

  private async fill(map: Map<string, Held>, key: string, load: () => Promise<MemoryWithInstitution[]>, generation: number, at: number): Promise<Rows> {
    const rows = await load();
    if (generation === this.generation && weight(rows) <= this.maxRows) {
      // a load that raced an older one of the same key replaces it (its rows no longer counted)
      this.remove(map, key);
      while (this.rowCount + weight(rows) > this.maxRows) {
        const from = this.personal.size >= this.shared.size ? this.personal : this.shared;
        const oldest = from.keys().next().value;
        if (oldest === undefined) break;
        this.remove(from, oldest);
      }
      map.set(key, { rows, at });
      this.rowCount += weight(rows);
    }
    return rows;
  }

  private drop(map: Map<string, Held>, key: string): void {
    this.generation++;
    if (key !== ALL_RECORDS) return this.remove(map, key);
    for (const held of map.values()) this.rowCount -= weight(held.rows);
    map.clear();
  }

  private remove(map: Map<string, Held>, key: string): void {
    const held = map.get(key);
    if (!held) return;
    this.rowCount -= weight(held.rows);
    map.delete(key);
  }
}

/** What an entry counts against the bound: its rows, and an empty list one (so that empty lists are bounded too). */
const weight = (rows: Rows): number => Math.max(1, rows.length);

/** What an answer of GET /api/user/memory was made of (AnswerMemo). */
export interface MemoizedAnswer<K extends object> {
  /** The caller's user row (who it is, its global role), as the session cache holds it. */
  user: object;
  /** The cached lists the answer was made of, in order. */
  parts: readonly Rows[];
  body: Buffer;
  key: K;
}

/**
 * The last answer of GET /api/user/memory per session, keyed by the session's memberships map. An answer is
 * a function of the caller's user row and memberships (editable, isAuthor) and of the cached lists it was
 * made of. The session cache (identity/auth-cache.ts) keeps one user row and one memberships map per
 * session until an invalidation replaces them, and MemoryCache replaces a list instead of changing it:
 * while the three are the same objects, the answer is the same bytes. Bounded by entries and by bytes (the
 * oldest answer goes first); an answer over `maxAnswerBytes` is not kept.
 */
export class AnswerMemo<K extends object> {
  private readonly answers = new Map<K, MemoizedAnswer<K>>();
  private bytes = 0;
  private readonly maxEntries: number;
  private readonly maxBytes: number;
  private readonly maxAnswerBytes: number;

  constructor(options: { maxEntries?: number; maxBytes?: number; maxAnswerBytes?: number } = {}) {
    this.maxEntries = options.maxEntries ?? 10_000;
    this.maxBytes = options.maxBytes ?? 32 * 1024 * 1024;
    this.maxAnswerBytes = options.maxAnswerBytes ?? 1024 * 1024;
  }

  /** The answer kept for this session, if it was made of these very objects. */
  get(key: K, user: object, parts: readonly Rows[]): Buffer | undefined {
    const memo = this.answers.get(key);
    if (!memo || memo.user !== user || memo.parts.length !== parts.length) return undefined;
    for (let i = 0; i < parts.length; i++) if (memo.parts[i] !== parts[i]) return undefined;
    return memo.body;
  }

  set(answer: MemoizedAnswer<K>): void {
    this.remove(answer.key);
    if (answer.body.length > this.maxAnswerBytes) return;
    this.answers.set(answer.key, answer);
    this.bytes += answer.body.length;
    while (this.answers.size > this.maxEntries || this.bytes > this.maxBytes) {
      const oldest = this.answers.keys().next().value;
      if (oldest === undefined) break;
      this.remove(oldest);
    }
  }

  get size(): { entries: number; bytes: number } {
    return { entries: this.answers.size, bytes: this.bytes };
  }

  private remove(key: K): void {
    const held = this.answers.get(key);
    if (!held) return;
    this.bytes -= held.body.length;
    this.answers.delete(key);
  }
}
