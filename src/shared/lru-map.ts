/**
 * A map bounded by its number of entries and, optionally, by a total weight of its values, that drops the
 * least recently used entries (read or written) first. A value heavier than the weight bound alone is not held.
 */
export class LruMap<K, V> {
  private readonly entries = new Map<K, V>();
  private weight = 0;

  constructor(private readonly limits: { maxEntries: number; maxWeight?: number; weigh?: (value: V) => number }) {}

  get size(): number {
    return this.entries.size;
  }

  /** The value of `key`, which becomes the most recently used. */
  get(key: K): V | undefined {
    const value = this.entries.get(key);
    if (value === undefined) return undefined;
    // Map iteration order is the eviction order: most recently used last
    this.entries.delete(key);
    this.entries.set(key, value);
    return value;
  }

  set(key: K, value: V): void {
    this.delete(key);
    const weight = this.weigh(value);
    if (this.limits.maxWeight !== undefined && weight > this.limits.maxWeight) return;
    this.entries.set(key, value);
    this.weight += weight;
    for (const [oldest, held] of this.entries) {
      if (this.entries.size <= this.limits.maxEntries && (this.limits.maxWeight === undefined || this.weight <= this.limits.maxWeight)) break;
      this.entries.delete(oldest);
      this.weight -= this.weigh(held);
    }
  }

  delete(key: K): void {
    const held = this.entries.get(key);
    if (held === undefined) return;
    this.entries.delete(key);
    this.weight -= this.weigh(held);
  }

  private weigh(value: V): number {
    return this.limits.weigh ? this.limits.weigh(value) : 1;
  }
}
