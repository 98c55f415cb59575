import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { RedisInvalidationChannel } from '../src/platform/invalidation-redis.js';
import type { AuthInvalidation } from '../src/modules/identity/auth-cache.js';
import { bearer, login, makeAccount, makeInstitution, makeUser, openTestDatabase, startTestApp, type TestApp } from './support/app.js';
import { CuttableProxy } from './support/cuttable-proxy.js';
import { skipWithoutRedis, startRedis, type RedisServer } from './support/redis.js';

const skip = skipWithoutRedis();

/** Polls until `check` holds: delivery between nodes goes over the network, not synchronously. */
async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within 5 s: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('auth invalidation over Redis pub/sub (a real redis-server on 127.0.0.1)', { skip }, () => {
  let redis: RedisServer;
  let a: TestApp;
  let b: TestApp;

  before(async () => {
    redis = await startRedis();
    // two nodes on one database, each with its own Redis connections (REDIS_URL), as two processes would be
    const database = await openTestDatabase();
    a = await startTestApp({ database, env: { REDIS_URL: redis.url } });
    b = await startTestApp({ database, env: { REDIS_URL: redis.url } });
  });
  after(async () => {
    await b?.close();
    await a?.close();
    await a?.database.close();
    await redis?.stop();
  });

  /** Two channels on `channel`: x reaches Redis through a proxy the test controls, y directly. */
  async function proxiedPair(channel: string, options: { heartbeatMs?: number } = {}) {
    const { port } = new URL(redis.url);
    const proxy = new CuttableProxy('127.0.0.1', Number(port));
    await proxy.start();
    const errors: unknown[] = [];
    const x = await RedisInvalidationChannel.connect<AuthInvalidation>({
      url: `redis://127.0.0.1:${proxy.port}`,
      channel,
      resetEvent: { kind: 'all' },
      onError: (err) => errors.push(err),
      ...options,
    });
    const y = await RedisInvalidationChannel.connect<AuthInvalidation>({ url: redis.url, channel, resetEvent: { kind: 'all' } });
    const close = async () => {
      await x.close();
      await y.close();
      await proxy.stop();
    };
    return { proxy, errors, x, y, close };
  }

  test('a logout on node A ends the session cached on node B; a password change ends the others', async () => {
    const account = await makeAccount(a.database);
    const user = await makeUser(a.database, { accountId: account.id });
    const s1 = await login(a.app, user.email);
    const s2 = await login(a.app, user.email);
    const onB = (token: string) => b.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(token) });
    for (const s of [s1, s2]) {
      assert.equal((await onB(s.accessToken)).statusCode, 200);
      const hits = b.app.ctx.auth.cache.snapshotStats().hits;
      assert.equal((await onB(s.accessToken)).statusCode, 200);
      assert.equal(b.app.ctx.auth.cache.snapshotStats().hits, hits + 1, 'cached on B');
    }
    assert.equal((await a.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(s1.accessToken) })).statusCode, 200);
    await eventually(async () => (await onB(s1.accessToken)).statusCode === 401, 'B refuses the logged-out session');
    assert.equal((await onB(s2.accessToken)).statusCode, 200, 'the other session is untouched');

    const s3 = await login(a.app, user.email);
    const change = await a.app.inject({
      method: 'PATCH',
      url: '/api/user/me',
      headers: bearer(s3.accessToken),
      payload: { currentPassword: user.password, password: 'another strong password' },
    });
    assert.equal(change.statusCode, 200);
    await eventually(async () => (await onB(s2.accessToken)).statusCode === 401, 'B refuses the session ended by the password change');
  });

  test('the other caches ride the same kind of channel: a branding change on node A is seen on node B', async () => {
    const account = await makeAccount(a.database);
    const admin = await makeUser(a.database, { accountId: account.id, role: 'accountadmin' });
    const inst = await makeInstitution(a.database, account.id, { ainame: 'Before' });
    const onB = () => b.app.inject({ method: 'POST', url: '/api/agent/branding', payload: { publicId: inst.publicId } });
    assert.equal((await onB()).json().ainame, 'Before'); // now cached on B
    const token = (await login(a.app, admin.email)).accessToken;
    const patched = await a.app.inject({ method: 'PATCH', url: `/api/admin/institution/${inst.id}`, headers: bearer(token), payload: { ainame: 'After' } });
    assert.equal(patched.statusCode, 200, patched.body);
    await eventually(async () => (await onB()).json().ainame === 'After', 'B drops its cached branding');
  });

  test('a node does not apply its own event twice, and a reconnect drops everything', async () => {
    const got: AuthInvalidation[] = [];
    const x = await RedisInvalidationChannel.connect<AuthInvalidation>({ url: redis.url, channel: 'test-channel', resetEvent: { kind: 'all' } });
    const y = await RedisInvalidationChannel.connect<AuthInvalidation>({ url: redis.url, channel: 'test-channel', resetEvent: { kind: 'all' } });
    const fromY: AuthInvalidation[] = [];
    try {
      x.subscribe((e) => got.push(e));
      y.subscribe((e) => fromY.push(e));
      x.publish({ kind: 'user', id: 'u1' });
      assert.deepEqual(got, [{ kind: 'user', id: 'u1' }], 'delivered locally before publish returns');
      await eventually(async () => fromY.length === 1, 'y receives the event');
      assert.deepEqual(fromY, [{ kind: 'user', id: 'u1' }]);
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(got.length, 1, 'x did not receive its own event back');

      // kill y's subscriber connection from the server side: y cannot know what it missed
      const { Redis } = await import('ioredis');
      const admin = new Redis(redis.url);
      await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
      await admin.quit();
      await eventually(async () => fromY.some((e) => e.kind === 'all'), 'y drops everything after losing its subscription');
    } finally {
      await x.close();
      await y.close();
    }
  });

  test('a link that goes silent without closing (half-open) is found by the heartbeat: the node reconnects and drops everything', async () => {
    // x's connections go through a proxy that stops carrying bytes but closes nothing: x would hear of it from TCP only after hours
    const { proxy, errors, x, y, close } = await proxiedPair('test-silent', { heartbeatMs: 200 });
    const fromX: AuthInvalidation[] = [];
    x.subscribe((e) => fromX.push(e));
    try {
      await new Promise((r) => setTimeout(r, 500)); // pings answered: nothing happens while the link works
      assert.equal(fromX.length, 0);
      assert.equal(errors.length, 0, errors.map(String).join(' | '));
      proxy.freeze();
      y.publish({ kind: 'user', id: 'u3' }); // lost for x: its subscription no longer hears anything
      await eventually(async () => fromX.some((e) => e.kind === 'all'), 'x drops everything once its heartbeat finds the link dead');
      assert.ok(!fromX.some((e) => e.kind === 'user'), 'the event itself never reached x');
      assert.ok(errors.some((e) => /heartbeat/.test(String((e as Error).message))));
      // reconnected through new connections: events flow again
      await eventually(async () => {
        y.publish({ kind: 'user', id: 'u4' });
        await new Promise((r) => setTimeout(r, 50));
        return fromX.some((e) => e.kind === 'user' && e.id === 'u4');
      }, 'x hears y again');
    } finally {
      await close();
    }
  });

  test('a publish that fails while Redis is out of reach is followed by a reset to the other nodes once it is back', async () => {
    // x reaches Redis through a proxy the test cuts; y's connections never drop, so y sees no gap of its own
    const { proxy, errors, x, y, close } = await proxiedPair('test-owed');
    const fromY: AuthInvalidation[] = [];
    y.subscribe((e) => fromY.push(e));
    try {
      proxy.cut();
      await new Promise((r) => setTimeout(r, 300)); // x knows its link is down: the publish waits in its offline queue
      x.publish({ kind: 'user', id: 'u2' }); // lost: Redis stays out of x's reach beyond the publish's retries
      // ioredis gives the publish up after its reconnect attempts (maxRetriesPerRequest), a few seconds
      for (const deadline = Date.now() + 20_000; !errors.some((e) => /max retries/i.test(String((e as Error).message))); ) {
        assert.ok(Date.now() < deadline, `the publish fails within 20 s: ${errors.map((e) => String((e as Error).message)).join(' | ')}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(fromY.length, 0, 'y has heard nothing');
      proxy.restore();
      await eventually(async () => fromY.some((e) => e.kind === 'all'), 'y is told to drop everything once x reaches Redis again');
    } finally {
      await close();
    }
  });
});
