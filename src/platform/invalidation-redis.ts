import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import type { InvalidationChannel } from './invalidation-channel.js';

interface Envelope<E> {
  /** The publishing node, so that it does not apply its own event twice. */
  origin: string;
  event: E;
}

export interface RedisChannelOptions<E> {
  url: string;
  /** Pub/sub channel name. */
  channel: string;
  /**
   * Delivered locally whenever this node may have missed events (the subscription dropped and came
   * back): subscribers drop everything, since they cannot know what changed meanwhile.
   */
  resetEvent: E;
  onError?: (err: unknown) => void;
  /**
   * Both connections are pinged this often; one that has not answered by the next ping is dropped and
   * reconnected (a half-open link, which TCP alone reports only after hours), which counts as a gap.
   * Default 10 s.
   */
  heartbeatMs?: number;
}

/** How often each connection is pinged when the options do not say. */
export const REDIS_HEARTBEAT_MS = 10_000;

/**
 * Invalidation across nodes over Redis pub/sub. Local subscribers are called synchronously on
 * `publish` (this node's write takes effect at once); the event also goes to Redis, and every other
 * node's subscriber connection delivers it to its own subscribers. Pub/sub does not queue messages
 * for a disconnected subscriber, so a reconnect is treated as a gap: `resetEvent` is delivered.
 */
export class RedisInvalidationChannel<E> implements InvalidationChannel<E> {
  private readonly origin = randomUUID();
  private readonly handlers = new Set<(event: E) => void>();
  private readonly pub: Redis;
  private readonly sub: Redis;
  private subscribedOnce = false;
  private closed = false;
  /** A publish failed: the other nodes missed an event, so a reset is owed to them (sent when Redis answers again). */
  private owedReset = false;
  private owedTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  /** The connections whose last ping has not been answered yet. */
  private readonly unanswered = new Set<Redis>();

  private constructor(private readonly options: RedisChannelOptions<E>) {
    const heartbeatMs = options.heartbeatMs ?? REDIS_HEARTBEAT_MS;
    // TCP keep-alive as well, for the links nothing is sent on between pings
    const common = { lazyConnect: true, maxRetriesPerRequest: 2, enableOfflineQueue: true, keepAlive: heartbeatMs } as const;
    this.pub = new Redis(options.url, common);
    // re-subscribed by hand after a reconnect (below), so that the reset follows the subscription
    this.sub = new Redis(options.url, { ...common, autoResubscribe: false });
    const onError = options.onError ?? (() => undefined);
    this.pub.on('error', onError);
    this.sub.on('error', onError);
    this.sub.on('message', (channel: string, text: string) => {
      if (channel !== options.channel) return;
      let envelope: Envelope<E>;
      try {
        envelope = JSON.parse(text) as Envelope<E>;
      } catch {
        this.deliver(options.resetEvent);
        return;
      }
      if (envelope.origin !== this.origin) this.deliver(envelope.event);
    });
    // After a reconnect: whatever was published meanwhile is lost, so subscribers drop everything, but only
    // once the subscription is back (ioredis reports 'ready' before it would re-subscribe by itself: a
    // cache refilled in between could keep what an event published in that gap changed).
    this.sub.on('ready', () => {
      if (!this.subscribedOnce || this.closed) return;
      this.sub.subscribe(options.channel).then(
        () => this.deliver(options.resetEvent),
        (err: unknown) => {
          onError(err);
          // the connection is gone again: its 'close' resets, and the next 'ready' subscribes
        },
      );
    });
    this.sub.on('close', () => {
      if (this.subscribedOnce && !this.closed) this.deliver(options.resetEvent);
    });
    this.pub.on('ready', () => this.payOwedReset());
    this.heartbeatTimer = setInterval(() => {
      this.ping(this.pub);
      this.ping(this.sub);
    }, heartbeatMs).unref();
  }

  /**
   * Pings a ready connection. If the previous ping is still unanswered, the link is taken for dead: the
   * connection is dropped and reconnects (the subscriber's 'close' and 'ready' deliver the reset; the
   * publisher's unanswered publishes are sent again or fail, and a failed one owes a reset).
   */
  private ping(conn: Redis): void {
    if (this.closed || conn.status !== 'ready') {
      this.unanswered.delete(conn);
      return;
    }
    if (this.unanswered.has(conn)) {
      this.unanswered.delete(conn);
      this.options.onError?.(new Error('Redis did not answer a heartbeat ping in time; reconnecting'));
      conn.disconnect(true);
      return;
    }
    this.unanswered.add(conn);
    conn.ping().then(
      () => this.unanswered.delete(conn),
      () => this.unanswered.delete(conn),
    );
  }

  /** Connects both connections and subscribes; fails if Redis cannot be reached. */
  static async connect<E>(options: RedisChannelOptions<E>): Promise<RedisInvalidationChannel<E>> {
    const channel = new RedisInvalidationChannel(options);
    try {
      await Promise.all([channel.pub.connect(), channel.sub.connect()]);
      await channel.sub.subscribe(options.channel);
      channel.subscribedOnce = true;
    } catch (err) {
      await channel.close();
      throw err;
    }
    return channel;
  }

  publish(event: E): void {
    this.deliver(event);
    const envelope: Envelope<E> = { origin: this.origin, event };
    this.pub.publish(this.options.channel, JSON.stringify(envelope)).catch((err: unknown) => {
      this.options.onError?.(err);
      this.oweReset();
    });
  }

  /**
   * A publish that failed leaves the other nodes with what it invalidated (their subscriptions may never
   * have dropped, so they see no gap): a reset is sent to them as soon as Redis takes a publish again, on
   * the publishing connection's next 'ready' and, until it goes out, every second.
   */
  private oweReset(): void {
    if (this.closed) return;
    this.owedReset = true;
    this.owedTimer ??= setInterval(() => this.payOwedReset(), 1000).unref();
  }

  private payOwedReset(): void {
    if (!this.owedReset || this.closed) return;
    this.owedReset = false;
    const envelope: Envelope<E> = { origin: this.origin, event: this.options.resetEvent };
    this.pub.publish(this.options.channel, JSON.stringify(envelope)).then(
      () => {
        if (!this.owedReset) {
          clearInterval(this.owedTimer);
          this.owedTimer = undefined;
        }
      },
      (err: unknown) => {
        this.options.onError?.(err);
        this.owedReset = true;
      },
    );
  }

  subscribe(handler: (event: E) => void): () => void {
    this.handlers.add(handler);
    return () => void this.handlers.delete(handler);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.owedTimer);
    clearInterval(this.heartbeatTimer);
    this.handlers.clear();
    // QUIT lets Redis finish what it was sent; a link that no longer answers gets 1 s, then is dropped
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled([this.pub.quit(), this.sub.quit()]), new Promise((resolve) => (timer = setTimeout(resolve, 1000)))]);
    clearTimeout(timer);
    this.pub.disconnect();
    this.sub.disconnect();
  }

  private deliver(event: E): void {
    for (const handler of this.handlers) handler(event);
  }
}
