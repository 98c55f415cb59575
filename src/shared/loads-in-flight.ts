/**
 * Loads in flight per key, for a cache whose invalidations bump a generation counter: a miss joins the
 * load of its key that started in the current generation, so a burst of misses reads once; a miss after
 * an invalidation starts its own load (the older one may hold what the invalidation changed).
 */
export class LoadsInFlight<V> {
  private readonly loads = new Map<string, { generation: number; value: Promise<V> }>();

  /** The load of `key` started in `generation`, or the one `start` begins now. */
  join(key: string, generation: number, start: () => Promise<V>): Promise<V> {
    const inFlight = this.loads.get(key);
    if (inFlight && inFlight.generation === generation) return inFlight.value;
    const value = start().finally(() => {
      if (this.loads.get(key)?.value === value) this.loads.delete(key);
    });
    this.loads.set(key, { generation, value });
    return value;
  }
}
