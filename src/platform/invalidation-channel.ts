/**
 * One channel over which a node tells every node (itself included) that cached data is stale.
 *
 * `publish` delivers to this process's subscribers synchronously, before it returns, so a write
 * takes effect on this node at once; other nodes hear it through the transport (Redis pub/sub with
 * `REDIS_URL`, see invalidation-redis.ts). Events are small JSON values; a subscriber must treat an
 * event it does not know as "drop everything" rather than ignore it.
 */
export interface InvalidationChannel<E> {
  publish(event: E): void;
  /** Returns the unsubscribe function. */
  subscribe(handler: (event: E) => void): () => void;
  close(): Promise<void>;
}

/** The single-process transport: subscribers are called in order, synchronously. */
export class InProcessChannel<E> implements InvalidationChannel<E> {
  private readonly handlers = new Set<(event: E) => void>();

  publish(event: E): void {
    for (const handler of this.handlers) handler(event);
  }

  subscribe(handler: (event: E) => void): () => void {
    this.handlers.add(handler);
    return () => void this.handlers.delete(handler);
  }

  async close(): Promise<void> {
    this.handlers.clear();
  }
}
