import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import type { Socket as ClientSocket } from 'socket.io-client';
import type { Database } from '../src/db/client.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { bearer, login, makeUser, makeWorld, openTestDatabase, startTestApp, type TestApp } from './support/app.js';
import { ClientSockets, endOf, listenLocally, stubModelEnv } from './support/realtime.js';
import { skipWithoutRedis, startRedis, type RedisServer } from './support/redis.js';

const skip = skipWithoutRedis();

/** Two nodes (REDIS_URL): revocations on node A close sockets held by node B; B's sockets of other tenants are never streamed to. */
describe('realtime across nodes: revocations and foreign sockets', { skip }, () => {
  let redis: RedisServer;
  let database: Database;
  let stub: OpenAiStub;
  let a: TestApp;
  let b: TestApp;
  let urlB = '';
  const sockets = new ClientSockets();

  before(async () => {
    redis = await startRedis();
    stub = await startOpenAiStub();
    database = await openTestDatabase();
    const env = stubModelEnv(stub, { REDIS_URL: redis.url });
    a = await startTestApp({ database, env });
    b = await startTestApp({ database, env });
    await listenLocally(a.app);
    urlB = await listenLocally(b.app);
  });
  after(async () => {
    sockets.closeAll();
    await a?.close();
    await b?.close();
    await database?.close();
    await stub?.close();
    await redis?.stop();
  });

  const openOnB = (token: string): Promise<ClientSocket> => sockets.open(urlB, token);

  test('a logout and a disabling on node A close the sockets on node B; node A never streams to another tenant’s socket on B', async () => {
    const w = await makeWorld(database);
    await database.db.execute(sql`update institutions set credits = 100 where id = ${w.a1.id}`);
    const root = (await login(a.app, w.superadmin.email)).accessToken;

    const s = await login(a.app, w.userA1.email);
    const onB = await openOnB(s.accessToken);
    const closed = endOf(onB);
    const out = await a.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(s.accessToken) });
    assert.equal(out.statusCode, 200);
    assert.deepEqual(await closed, { message: 'Session has ended', reason: 'io server disconnect' });

    const user = await makeUser(database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const victim = await openOnB((await login(a.app, user.email)).accessToken);
    const closed2 = endOf(victim);
    const res = await a.app.inject({ method: 'PATCH', url: `/api/admin/user/${user.id}`, headers: bearer(root), payload: { status: 'disabled' } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal((await closed2).reason, 'io server disconnect');

    const foreign = await openOnB((await login(a.app, w.userB1.email)).accessToken);
    const seen: unknown[] = [];
    foreign.on('RECEIVE_STREAM', (e) => seen.push(e));
    const token = (await login(a.app, w.userA1.email)).accessToken;
    stub.setChatHandler(() => 'private');
    const q = await a.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token }, payload: { id: 1, inputs: ['hi'], requestArgs: { socketId: foreign.id } } });
    assert.equal(q.statusCode, 200, q.body);
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(seen, []);
  });
});
