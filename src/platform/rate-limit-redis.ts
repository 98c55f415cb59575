import { Redis } from 'ioredis';
import { REDIS_HEARTBEAT_MS, quitRedis, startRedisHeartbeat } from './redis-heartbeat.js';

/** What a store's `incr` reports: the requests counted in the key's window so far (this one included) and the ms left of it. */
export interface RateCount {
  current: number;
  ttl: number;
}

type Callback = (error: Error | null, result?: RateCount) => void;

/**
 * One counter a key for a fixed window: the first request of a key starts its window (PEXPIRE), the ones after
 * it count until it expires. A key that somehow has no expiry gets one (a counter never lives for ever).
 */
const COUNT_SCRIPT = `
local current = redis.call('INCR', KEYS[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {current, ttl}
`;

/** How often a failing Redis is reported at most. */
const REPORT_EVERY_MS = 10_000;

/** The most keys the fallback counters keep (the oldest window goes first when full). */
const FALLBACK_MAX_KEYS = 50_000;

/** This process's counters, with the same fixed windows: what the limits count while Redis cannot be reached. */
export class LocalRateCounters {
  private readonly windows = new Map<string, { count: number; endsAt: number }>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly maxKeys = FALLBACK_MAX_KEYS,
  ) {}

  count(key: string, windowMs: number): RateCount {
    const now = this.now();
    let window = this.windows.get(key);
    if (!window || window.endsAt <= now) {
      if (window) this.windows.delete(key);
      if (this.windows.size >= this.maxKeys) this.windows.delete(this.windows.keys().next().value!);
      window = { count: 0, endsAt: now + windowMs };
      this.windows.set(key, window);
    }
    window.count++;
    return { current: window.count, ttl: window.endsAt - now };
  }
}

export interface SharedRateLimitOptions {
  url: string;
  /** Prefix of every counter's key in Redis. */
  prefix?: string;
  /** A Redis error (connection, heartbeat, or a count that failed and was made locally instead), at most once every 10 s. */
  onError: (err: unknown) => void;
  /** How long a count may wait for Redis before it is made locally (ms). */
  commandTimeoutMs?: number;
  heartbeatMs?: number;
}

/**
 * The rate limits' counters in Redis, shared by every node: with REDIS_URL, a user's 20 searches a minute are 20
 * on all the nodes together, not 20 on each. A count is one script (INCR, and PEXPIRE when it starts a window),
 * atomic in Redis. Redis is never waited for: the connection queues nothing while it is down
 * (enableOfflineQueue off) and a count gets `commandTimeoutMs`; a count Redis does not make is made by this
 * process's own counters (LocalRateCounters), so that while Redis is out of reach every limit still holds on
 * each node, as it did before the counters were shared; a request is never refused or failed because Redis is.
 */
export class SharedRateLimitCounters {
  private readonly redis: Redis;
  private readonly local = new LocalRateCounters();
  private readonly prefix: string;
  private readonly stopHeartbeat: () => void;
  private lastReported = 0;

  constructor(private readonly options: SharedRateLimitOptions) {
    const heartbeatMs = options.heartbeatMs ?? REDIS_HEARTBEAT_MS;
    this.prefix = options.prefix ?? 'twin:rate-limit:';
    // connected by start(), once the app is built: an app whose start fails has opened no connection to leave behind
    this.redis = new Redis(options.url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: options.commandTimeoutMs ?? 1000,
      keepAlive: heartbeatMs,
    });
    this.redis.defineCommand('twinRateCount', { numberOfKeys: 1, lua: COUNT_SCRIPT });
    // a connection that is down errors at every reconnection attempt: reported as a failed count is
    this.redis.on('error', (err: unknown) => this.report(err));
    this.stopHeartbeat = startRedisHeartbeat([this.redis], heartbeatMs, (err) => this.report(err));
  }

  /** Connects (without waiting: REDIS_URL was found reachable at start, and counts are made here until Redis answers). */
  start(): void {
    this.redis.connect().catch((err: unknown) => this.report(err));
  }

  count(key: string, windowMs: number, done: Callback): void {
    const command = (this.redis as unknown as { twinRateCount(key: string, windowMs: number): Promise<[number, number]> }).twinRateCount;
    command.call(this.redis, this.prefix + key, windowMs).then(
      ([current, ttl]) => done(null, { current, ttl }),
      (err: unknown) => {
        this.report(err);
        done(null, this.local.count(key, windowMs));
      },
    );
  }

  /** Tells onError, at most once every 10 s: while Redis fails, a line now and then, not one a request or reconnection attempt. */
  private report(err: unknown): void {
    const now = Date.now();
    if (now - this.lastReported < REPORT_EVERY_MS) return;
    this.lastReported = now;
    this.options.onError(err);
  }

  /** A store class for @fastify/rate-limit's `store` option, counting here. */
  storeClass() {
    const count = (key: string, windowMs: number, done: Callback) => this.count(key, windowMs, done);
    return class SharedStore {
      incr(key: string, done: Callback, timeWindow: number): void {
        count(key, timeWindow, done);
      }
      // every limit's keys are named apart already (rate-limit.ts: `search-content:<user>`, `login-ip:<ip>`...)
      child(): SharedStore {
        return this;
      }
    };
  }

  async close(): Promise<void> {
    this.stopHeartbeat();
    await quitRedis([this.redis]);
  }
}
