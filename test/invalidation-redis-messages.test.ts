import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { ALL_RECORDS, CACHE_RESET, ChannelInvalidationBus, type CacheInvalidation } from '../src/platform/invalidation.js';
import { RedisInvalidationChannel } from '../src/platform/invalidation-redis.js';
import { waitFor } from './support/realtime.js';
import { skipWithoutRedis, startRedis, type RedisServer } from './support/redis.js';

/**
 * invalidation-channel.ts: "a subscriber must treat an event it does not know as 'drop everything' rather than ignore it";
 * invalidation.ts: "an event this version does not know (another node, newer or older) is treated as 'drop everything'".
 */
const skip = skipWithoutRedis();

describe('invalidation over Redis: messages this version cannot read', { skip }, () => {
  let redis: RedisServer;
  before(async () => {
    redis = await startRedis();
  });
  after(() => redis.stop());

  for (const [label, text] of [
    ['an envelope without an event', JSON.stringify({ origin: 'another-node' })],
    ['an envelope whose event is null', JSON.stringify({ origin: 'another-node', event: null })],
    ['a JSON null', 'null'],
    ['not JSON', 'hello'],
    ['an event that is a string', JSON.stringify({ origin: 'another-node', event: 'user' })],
    ['an event of an unknown topic', JSON.stringify({ origin: 'another-node', event: { topic: 'newer-topic', id: 'x' } })],
  ] as const) {
    test(`${label} drops every record (and does not throw out of the Redis message handler)`, async () => {
      const channel = await RedisInvalidationChannel.connect<CacheInvalidation>({ url: redis.url, channel: 'audit-inv', resetEvent: CACHE_RESET });
      const bus = new ChannelInvalidationBus(channel);
      const seen: string[] = [];
      bus.subscribe('user', (m) => seen.push(m.id));
      const thrown: unknown[] = [];
      const onUncaught = (err: unknown) => thrown.push(err);
      const listeners = process.listeners('uncaughtException');
      process.removeAllListeners('uncaughtException');
      process.on('uncaughtException', onUncaught);
      const pub = new Redis(redis.url);
      try {
        await pub.publish('audit-inv', text);
        await waitFor(() => seen.length > 0 || thrown.length > 0, 'the message to be handled');
      } finally {
        process.removeListener('uncaughtException', onUncaught);
        for (const l of listeners) process.on('uncaughtException', l);
        pub.disconnect();
        bus.close();
        await channel.close();
      }
      assert.deepEqual(thrown.map(String), [], 'an exception escaped the Redis message handler (an uncaught exception: the process would crash)');
      assert.deepEqual(seen, [ALL_RECORDS]);
    });
  }
});
