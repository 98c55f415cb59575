import { createHash } from 'node:crypto';
import type { Clock } from '../../shared/clock.js';
import { ALL_RECORDS, type InvalidationBus } from '../../platform/invalidation.js';
import { LoadsInFlight } from '../../shared/loads-in-flight.js';

/**
 * What is served for one publicId: the branding serialized and encoded once (sent as these bytes: no
 * per-request length or encoding of a string) and its ETag, or "no such twin".
 */
export type BrandingEntry = { found: true; institutionId: string; body: Buffer; etag: string } | { found: false };

interface Stored {
  entry: BrandingEntry;
  /** Negative entries expire (a publicId is random, but one may appear with a new institution). */
  expiresAt: number;
}

export interface BrandingCacheOptions {
  maxEntries?: number;
  negativeTtlMs?: number;
  /**
   * How long a found branding is served without reading it again (default 5 minutes). Invalidation
   * takes effect at once; this bounds what a lost one could leave (a subscriber that died silently).
   */
  positiveTtlMs?: number;
}

export const etagOf = (body: Buffer): string => `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;

/**
 * In-process cache of the public branding lookup, keyed by publicId. Positive entries live until the
 * institution changes (and at most positiveTtlMs): the cache subscribes to the `institution` topic of the invalidation bus (fed by
 * the code that updates or deletes institutions; a Redis-backed bus reaches every node). Bounded: the
 * oldest entry goes first when full.
 *
 * A load that started before an invalidation does not store its (possibly stale) result: every
 * invalidation bumps a generation counter, and a load stores only if the counter did not move. Misses of
 * one public id share the load in flight, unless an invalidation came after it started.
 */
export class BrandingCache {
  private readonly entries = new Map<string, Stored>();
  private readonly publicIdOf = new Map<string, string>();
  private generation = 0;
  private readonly loads = new LoadsInFlight<BrandingEntry>();
  private readonly maxEntries: number;
  private readonly negativeTtlMs: number;
  private readonly positiveTtlMs: number;
  readonly unsubscribe: () => void;

  constructor(
    bus: InvalidationBus,
    private readonly clock: Clock,
    options: BrandingCacheOptions = {},
  ) {
    this.maxEntries = options.maxEntries ?? 10_000;
    this.negativeTtlMs = options.negativeTtlMs ?? 10_000;
    this.positiveTtlMs = options.positiveTtlMs ?? 5 * 60_000;
    this.unsubscribe = bus.subscribe('institution', ({ id }) => this.invalidate(id));
  }

  /** Drops what is cached for an institution (by its id), or everything for `*`. */
  invalidate(institutionId: string): void {
    this.generation++;
    if (institutionId === ALL_RECORDS) {
      this.entries.clear();
      this.publicIdOf.clear();
      return;
    }
    const publicId = this.publicIdOf.get(institutionId);
    if (publicId !== undefined) {
      this.entries.delete(publicId);
      this.publicIdOf.delete(institutionId);
    }
  }

  /** The cached entry, or undefined when it must be loaded. */
  peek(publicId: string): BrandingEntry | undefined {
    const stored = this.entries.get(publicId);
    if (!stored) return undefined;
    if (stored.expiresAt <= this.clock.now().getTime()) {
      this.drop(publicId);
      return undefined;
    }
    return stored.entry;
  }

  get(publicId: string, load: () => Promise<BrandingEntry>): Promise<BrandingEntry> {
    const hit = this.peek(publicId);
    if (hit) return Promise.resolve(hit);
    // a burst of misses (a page of a new tenant, every request just after an invalidation) reads once,
    // unless an invalidation came after that read started
    const generation = this.generation;
    return this.loads.join(publicId, generation, async () => {
      const loaded = await load();
      if (generation === this.generation) this.store(publicId, loaded);
      return loaded;
    });
  }

  get size(): number {
    return this.entries.size;
  }

  private store(publicId: string, entry: BrandingEntry): void {
    if (this.entries.size >= this.maxEntries && !this.entries.has(publicId)) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.drop(oldest);
    }
    this.entries.set(publicId, { entry, expiresAt: this.clock.now().getTime() + (entry.found ? this.positiveTtlMs : this.negativeTtlMs) });
    if (entry.found) this.publicIdOf.set(entry.institutionId, publicId);
  }

  private drop(publicId: string): void {
    const stored = this.entries.get(publicId);
    this.entries.delete(publicId);
    if (stored?.entry.found) this.publicIdOf.delete(stored.entry.institutionId);
  }
}
