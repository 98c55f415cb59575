import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freePort } from '../bench/support.js';
import { LocalRateCounters, SharedRateLimitCounters } from '../src/platform/rate-limit-redis.js';
import { bearer, login, makeWorld, openTestDatabase, startTestApp, type TestApp } from './support/app.js';
import { CuttableProxy } from './support/cuttable-proxy.js';
import { skipWithoutRedis, startRedis, type RedisServer } from './support/redis.js';

const skip = skipWithoutRedis();

/**
 * With REDIS_URL the rate limits count in Redis: a user's searches a minute are counted on all the nodes together.
 * The search limit (SEARCH_RATE_LIMIT_PER_MINUTE) stands for every limit here: they all count through one store.
 */
describe('rate limits shared by the nodes through Redis (a real redis-server on 127.0.0.1)', { skip }, () => {
  let redis: RedisServer;
  let proxy: CuttableProxy;
  let a: TestApp;
  let b: TestApp;
  let c: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const env = (url: string) => ({ REDIS_URL: url, SEARCH_RATE_LIMIT_PER_MINUTE: '3', LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' });
  const search = (node: TestApp, token: string) =>
    node.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: bearer(token), payload: { query: 'speed of light' } });

  before(async () => {
    redis = await startRedis();
    proxy = new CuttableProxy('127.0.0.1', Number(new URL(redis.url).port));
    await proxy.start();
    // three nodes on one database; c reaches Redis through a proxy the test can cut
    const database = await openTestDatabase();
    a = await startTestApp({ database, env: env(redis.url) });
    b = await startTestApp({ database, env: env(redis.url) });
    c = await startTestApp({ database, env: env(`redis://127.0.0.1:${proxy.port}`) });
    w = await makeWorld(database);
  });
  after(async () => {
    await c?.close();
    await b?.close();
    await a?.close();
    await a?.database.close();
    await proxy?.stop();
    await redis?.stop();
  });

  test("a user's requests on two nodes count together: the fourth of a limit of 3 is a 429 on whichever node it reaches; another user is not counted", async () => {
    const token = (await login(a.app, w.userA1.email)).accessToken;
    const statuses = [];
    for (const node of [a, b, a]) statuses.push((await search(node, token)).statusCode);
    assert.deepEqual(statuses, [200, 200, 200]);
    const refused = await search(b, token);
    assert.equal(refused.statusCode, 429, 'the requests on a and b count together (b alone had seen one of them)');
    assert.equal(refused.json().error.code, 'RATE_LIMITED');
    const retryAfter = Number(refused.headers['retry-after']);
    assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${refused.headers['retry-after']}`);
    assert.equal((await search(a, token)).statusCode, 429);
    const other = (await login(b.app, w.userA2.email)).accessToken;
    assert.equal((await search(b, other)).statusCode, 200);
  });

  test("while a node cannot reach Redis its requests are still answered, and its limits count in the node's own counters", async () => {
    const token = (await login(c.app, w.userB1.email)).accessToken;
    proxy.cut();
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await search(c, token)).statusCode);
      // not 500 (a failed count), not four 200s (no limit while Redis is away)
      assert.deepEqual(statuses, [200, 200, 200, 429]);
    } finally {
      proxy.restore();
    }
  });
});

test('LocalRateCounters: a fixed window from the first request of a key; a full table forgets its oldest key', () => {
  let now = 1_000;
  const counters = new LocalRateCounters(() => now, 2);
  assert.deepEqual(counters.count('k', 60_000), { current: 1, ttl: 60_000 });
  now += 59_000;
  assert.deepEqual(counters.count('k', 60_000), { current: 2, ttl: 1_000 });
  now += 1_000;
  assert.deepEqual(counters.count('k', 60_000), { current: 1, ttl: 60_000 }, 'a new window once the last one ended');
  counters.count('x', 60_000);
  counters.count('y', 60_000); // a third key: the oldest, k, goes
  assert.equal(counters.count('k', 60_000).current, 1);
  assert.equal(counters.count('y', 60_000).current, 2);
});

test('a Redis that cannot be reached is reported at most once every 10 s, whatever its reconnection attempts and failed counts', async () => {
  const errors: unknown[] = [];
  // nothing listens on this port: every connection attempt fails at once, and ioredis tries again within milliseconds
  const counters = new SharedRateLimitCounters({ url: `redis://127.0.0.1:${await freePort()}`, onError: (err) => errors.push(err) });
  counters.start();
  try {
    const counts = [];
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 300));
      counts.push(await new Promise<number>((resolve) => counters.count('reported', 60_000, (_err, res) => resolve(res!.current))));
    }
    assert.deepEqual(counts, [1, 2, 3, 4, 5], 'counted by the node meanwhile');
    assert.equal(errors.length, 1, `reported ${errors.length} times in 1.5 s`);
  } finally {
    await counters.close();
  }
});
