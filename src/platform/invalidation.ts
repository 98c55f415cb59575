/**
 * Cache invalidation between the code that changes a record and the caches that hold copies of it.
 *
 * Writers announce "this record changed" on a topic; caches subscribe and drop their copies. The
 * in-process bus delivers to this node only, synchronously, before `publish` returns, so a request
 * that follows the write on this node never sees the old copy. With several nodes a Redis pub/sub
 * implementation of the same interface (publish to a channel per topic, subscribers call the same
 * handlers) also reaches the caches of the other nodes; the writers and the caches do not change.
 */
/**
 * institution: an institution changed or was deleted (id: the institution).
 * user: a user was deleted (id: the user), with everything that cascades from it.
 * memory-personal: personal memory rows of a user changed (id: the author).
 * memory-shared: shared memory rows of an institution changed (id: the institution).
 */
export type InvalidationTopic = 'institution' | 'user' | 'memory-personal' | 'memory-shared';

export interface InvalidationMessage {
  /** Id of the changed record; `*` means every record of the topic (e.g. after a cascade delete). */
  id: string;
}

export type InvalidationHandler = (message: InvalidationMessage) => void;

export interface InvalidationBus {
  /** Announces a change; local subscribers have run when the returned promise settles. */
  publish(topic: InvalidationTopic, message: InvalidationMessage): Promise<void>;
  /** Registers a handler; returns a function that removes it. */
  subscribe(topic: InvalidationTopic, handler: InvalidationHandler): () => void;
}

export const ALL_RECORDS = '*';

/** One node: handlers are called in the publishing call stack. */
export class LocalInvalidationBus implements InvalidationBus {
  private readonly handlers = new Map<InvalidationTopic, Set<InvalidationHandler>>();

  async publish(topic: InvalidationTopic, message: InvalidationMessage): Promise<void> {
    this.deliver(topic, message);
  }

  /** Runs the local handlers; a remote transport calls this for messages from other nodes. */
  deliver(topic: InvalidationTopic, message: InvalidationMessage): void {
    for (const handler of this.handlers.get(topic) ?? []) handler(message);
  }

  subscribe(topic: InvalidationTopic, handler: InvalidationHandler): () => void {
    let set = this.handlers.get(topic);
    if (!set) this.handlers.set(topic, (set = new Set()));
    set.add(handler);
    return () => set.delete(handler);
  }
}
