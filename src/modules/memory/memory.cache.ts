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
