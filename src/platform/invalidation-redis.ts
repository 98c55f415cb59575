import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { endpointOf } from '../shared/endpoint.js';
import { StartupError } from '../shared/errors.js';
import type { InvalidationChannel } from './invalidation-channel.js';
import { quitRedis, REDIS_HEARTBEAT_MS, startRedisHeartbeat } from './redis-heartbeat.js';

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
  private readonly stopHeartbeat: () => void;

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
      let envelope: Partial<Envelope<E>> | null;
      try {
        envelope = JSON.parse(text) as Partial<Envelope<E>> | null;
      } catch {
        envelope = null;
      }
      // a message of another shape (another version, another client of this Redis) is not ignored: it may have
      // said something this node cannot read, so everything is dropped, as after a gap
      const readable = typeof envelope === 'object' && envelope !== null && typeof envelope.event === 'object' && envelope.event !== null;
      if (!readable) this.deliver(options.resetEvent);
      else if (envelope!.origin !== this.origin) this.deliver(envelope!.event as E);
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
    // a dropped subscriber delivers the reset through 'close' and 'ready'; the publisher's unanswered
    // publishes are sent again on reconnect, or fail and owe a reset
    this.stopHeartbeat = startRedisHeartbeat([this.pub, this.sub], heartbeatMs, onError);
  }

  /**
   * Connects both connections and subscribes; fails if Redis cannot be reached, with a StartupError naming
   * Redis by its host and port (never the password) and why (the socket's error code, or Redis's answer).
   */
  static async connect<E>(options: RedisChannelOptions<E>): Promise<RedisInvalidationChannel<E>> {
    const channel = new RedisInvalidationChannel(options);
    // ioredis rejects connect() with a bare "Connection is closed."; the cause came as an 'error' event
    let cause: unknown;
    const remember = (err: unknown) => (cause ??= err);
    channel.pub.on('error', remember);
    channel.sub.on('error', remember);
    try {
      await Promise.all([channel.pub.connect(), channel.sub.connect()]);
      await channel.sub.subscribe(options.channel);
      channel.subscribedOnce = true;
    } catch (err) {
      await channel.close();
      throw unreachable(options.url, cause ?? err);
    } finally {
      channel.pub.off('error', remember);
      channel.sub.off('error', remember);
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
    this.stopHeartbeat();
    this.handlers.clear();
    await quitRedis([this.pub, this.sub]);
  }

  /** Hands an event to every subscriber; one that throws is reported (onError), never thrown into ioredis's listener, where it would end the process. */
  private deliver(event: E): void {
    for (const handler of this.handlers) {
      try {
        handler(event);
      } catch (err) {
        this.options.onError?.(err);
      }
    }
  }
}

/** Why Redis could not be used at start, named by REDIS_URL's host and port (ioredis's defaults when absent). */
function unreachable(url: string, cause: unknown): StartupError {
  const endpoint = endpointOf(url, 6379);
  // config.ts refuses what is not a URL; never quoted, it could hold a password
  const where = endpoint ? `${endpoint.host}:${endpoint.port}` : '(not a redis:// URL)';
  const { code, message } = (cause ?? {}) as { code?: unknown; message?: unknown };
  return new StartupError(
    typeof code === 'string' && /^E[A-Z]+$/.test(code)
      ? `Cannot reach Redis at REDIS_URL ${where} (${code})`
      : `Redis at REDIS_URL ${where} refused the connection: ${typeof message === 'string' ? message : String(cause)}`,
    { cause },
  );
}
