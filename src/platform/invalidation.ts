import type { InvalidationChannel } from './invalidation-channel.js';

/**
 * Cache invalidation between the code that changes a record and the caches that hold copies of it.
 *
 * Writers announce "this record changed" on a topic; caches subscribe and drop their copies. Local
 * delivery is synchronous, before `publish` returns, so a request that follows the write on this node
 * never sees the old copy. `ChannelInvalidationBus` carries the topics over the same kind of
 * channel as the auth cache (invalidation-channel.ts: this process, or Redis pub/sub with REDIS_URL),
 * so the caches of the other nodes drop their copies too; the writers and the caches do not change.
 */
/**
 * institution: an institution changed or was deleted (id: the institution).
 * user: a user was deleted (id: the user), with everything that cascades from it.
 * memory-personal: personal memory rows of a user changed (id: the author).
 * memory-shared: shared memory rows of an institution changed (id: the institution).
 */
export const INVALIDATION_TOPICS = ['institution', 'user', 'memory-personal', 'memory-shared'] as const;
export type InvalidationTopic = (typeof INVALIDATION_TOPICS)[number];

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

/** A topic message on the wire; topic `*` (a reset after a gap in the channel) drops every record of every topic. */
export interface CacheInvalidation {
  topic: InvalidationTopic | '*';
  id: string;
}

export const CACHE_RESET: CacheInvalidation = { topic: '*', id: ALL_RECORDS };

/** Topics over an invalidation channel: delivered here at once, and on every node the channel reaches. */
export class ChannelInvalidationBus implements InvalidationBus {
  private readonly local = new LocalInvalidationBus();
  private readonly unsubscribe: () => void;

  constructor(private readonly channel: InvalidationChannel<CacheInvalidation>) {
    this.unsubscribe = channel.subscribe((event) => this.apply(event));
  }

  async publish(topic: InvalidationTopic, message: InvalidationMessage): Promise<void> {
    this.channel.publish({ topic, id: message.id });
  }

  subscribe(topic: InvalidationTopic, handler: InvalidationHandler): () => void {
    return this.local.subscribe(topic, handler);
  }

  close(): void {
    this.unsubscribe();
  }

  private apply(event: CacheInvalidation): void {
    // an event this version does not know (another node, newer or older) is treated as "drop everything"
    const known = typeof event === 'object' && event !== null && (INVALIDATION_TOPICS as readonly string[]).includes(event.topic) && typeof event.id === 'string';
    if (known) this.local.deliver(event.topic as InvalidationTopic, { id: event.id });
    else for (const topic of INVALIDATION_TOPICS) this.local.deliver(topic, { id: ALL_RECORDS });
  }
}
