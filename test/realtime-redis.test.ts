import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { io as connect, type Socket } from 'socket.io-client';
import { buildApp, type App } from '../src/app.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { login, makeWorld, openTestDatabase, testConfig } from './support/app.js';
import type { Database } from '../src/db/client.js';
import { skipWithoutRedis, startRedis, type RedisServer } from './support/redis.js';

const skip = skipWithoutRedis();

/**
 * Two nodes of the service joined by the Socket.IO Redis adapter (REDIS_URL): a client connected to
 * node B receives the answer of a Q&A request served by node A. Needs a redis-server binary (Debian's
 * redis-server package); the test server listens on 127.0.0.1 on a port chosen at run time.
 */
describe('realtime across nodes (Redis adapter)', { skip }, () => {
  let redis: RedisServer | undefined;
  let database: Database;
  let stub: OpenAiStub;
  let nodeA: App;
  let nodeB: App;
  let dataDir: string;
  const sockets: Socket[] = [];

  before(async () => {
    redis = await startRedis();
    stub = await startOpenAiStub();
    database = await openTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'twin-redis-'));
    const env = { REDIS_URL: redis.url, LLM_PROVIDER: 'openai-compatible', LLM_BASE_URL: stub.baseUrl, LLM_MODEL: 'stub-chat', LLM_MAX_RETRIES: '0', INGEST_WORKERS: '0' };
    // Two apps on one database: what two processes behind a load balancer share through PostgreSQL.
    nodeA = await buildApp({ config: testConfig(dataDir, env), database, skipMigrations: true });
    nodeB = await buildApp({ config: testConfig(dataDir, env), database, skipMigrations: true });
    await nodeA.listen({ port: 0, host: '127.0.0.1' });
    await nodeB.listen({ port: 0, host: '127.0.0.1' });
  });
  after(async () => {
    for (const s of sockets) s.disconnect();
    await nodeA?.close();
    await nodeB?.close();
    await database?.close();
    await stub?.close();
    await redis?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  test('a socket connected to node B receives the stream of a request answered by node A; another user’s socket never does', async () => {
    const w = await makeWorld(database);
    await database.db.execute(sql`update institutions set credits = 100 where id = ${w.a1.id}`);
    const token = (await login(nodeA, w.userA1.email)).accessToken;
    const other = (await login(nodeA, w.adminA1.email)).accessToken;
    const urlB = `http://127.0.0.1:${(nodeB.server.address() as AddressInfo).port}`;
    const open = async (tk: string) => {
      const s = connect(urlB, { auth: { token: tk }, transports: ['websocket'], reconnection: false });
      sockets.push(s);
      await new Promise<void>((resolve, reject) => {
        s.once('connect', () => resolve());
        s.once('connect_error', reject);
      });
      return s;
    };
    const socket = await open(token);
    const events: Array<{ chunk: string; index: number; done: boolean }> = [];
    const done = new Promise<void>((resolve) => socket.on('RECEIVE_STREAM', (e) => (events.push(e), e.done && resolve())));
    stub.setChatHandler(() => 'streamed across two nodes through redis pub sub');
    const res = await nodeA.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token }, payload: { id: 3, inputs: ['hi'], requestArgs: { socketId: socket.id } } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().streamingFailed, false);
    await done;
    assert.deepEqual(events.map((e) => e.index), events.map((_, i) => i));
    assert.equal(events.filter((e) => !e.done).map((e) => e.chunk).join(''), res.json().outputs[0]);
    assert.equal(stub.requestsTo('/v1/chat/completions').at(-1)!.body.stream, true);

    // The other user's socket on node B: node A does not stream to it.
    const foreign = await open(other);
    const seen: unknown[] = [];
    foreign.on('RECEIVE_STREAM', (e) => seen.push(e));
    const res2 = await nodeA.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token }, payload: { id: 4, inputs: ['hi'], requestArgs: { socketId: foreign.id } } });
    assert.equal(res2.statusCode, 200, res2.body);
    assert.equal(stub.requestsTo('/v1/chat/completions').at(-1)!.body.stream, false);
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(seen, []);
  });

  test('a socket on node B that disconnects mid-answer: the answer of node A says streamingFailed, and is saved so', async () => {
    const w = await makeWorld(database);
    await database.db.execute(sql`update institutions set credits = 100 where id = ${w.a1.id}`);
    const token = (await login(nodeA, w.userA1.email)).accessToken;
    const urlB = `http://127.0.0.1:${(nodeB.server.address() as AddressInfo).port}`;
    const socket = connect(urlB, { auth: { token }, transports: ['websocket'], reconnection: false });
    sockets.push(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    let got = 0;
    socket.on('RECEIVE_STREAM', () => {
      if (++got === 2) socket.disconnect();
    });
    const words = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');
    stub.setChatHandler(() => words);
    stub.streamChunkDelayMs(30);
    try {
      const res = await nodeA.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token }, payload: { id: 11, inputs: ['a long one'], requestArgs: { socketId: socket.id } } });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.equal(stub.requestsTo('/v1/chat/completions').at(-1)!.body.stream, true, 'it was streamed');
      assert.equal(body.outputs[0], words, 'the response still holds the whole answer');
      assert.equal(body.streamingFailed, true);
      assert.match(body.streamingError, /disconnected/u);
      const rows = await database.db.execute(sql`select streamed, streaming_failed from histories where id = ${body.historyId}`);
      assert.deepEqual((rows as unknown as { rows: unknown[] }).rows, [{ streamed: true, streaming_failed: true }]);
    } finally {
      stub.streamChunkDelayMs(0);
    }
  });
});
