import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import type { Socket as ClientSocket } from 'socket.io-client';
import { rowsOf, type Database } from '../src/db/client.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { ClientSockets, listenLocally, stubModelEnv, workerDatabase, type StreamEvent } from './support/realtime.js';
import { bearer, login, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

const QANDA = '/api/ai/personal/qanda';

describe('realtime: how a streamed answer ends', () => {
  let t: TestApp;
  let w: World;
  let stub: OpenAiStub;
  let base = '';
  let database: Database;
  const sockets = new ClientSockets();

  before(async () => {
    stub = await startOpenAiStub();
    database = await workerDatabase();
    t = await startTestApp({ database, env: stubModelEnv(stub, { LLM_TIMEOUT_MS: '10000' }) });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
    await database.close();
    await stub.close();
  });

  const openSocket = (token: string): Promise<ClientSocket> => sockets.open(base, token);

  const ask = (token: string, body: Record<string, unknown>) => t.app.inject({ method: 'POST', url: QANDA, headers: { 'x-access-token': token }, payload: body });

  /**
   * Contract §6: "a last event has done: true, chunk: "" and usage, credits". Sent on a success, on a provider
   * failure (502) and on a tool round that runs out of credits (402); a request ending with 409 CONFLICT (its
   * institution deleted while it streamed) sent none: the client had the chunks and waited for a `done` that never
   * came, on a socket that stays connected. Its message also blamed the reservation's age instead of the deletion.
   */
  test('an answer whose institution is deleted while it streams (409) still ends its stream with done: true', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Doomed Physics', ainame: 'Doomed' });
    await t.database.db.execute(sql`update institutions set credits = 100 where id = ${inst.id}`);
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const token = (await login(t.app, user.email)).accessToken;
    const root = (await login(t.app, w.superadmin.email)).accessToken;

    stub.setChatHandler(() => ({ content: Array.from({ length: 45 }, (_, i) => `word${i}`).join(' '), usage: { prompt_tokens: 20, completion_tokens: 45 } }));
    stub.streamChunkDelayMs(40);
    try {
      const socket = await openSocket(token);
      const events: StreamEvent[] = [];
      let deleted: Promise<{ statusCode: number; body: string }> | undefined;
      socket.on('RECEIVE_STREAM', (e: StreamEvent) => {
        events.push(e);
        // an administrator deletes the institution while the answer streams
        deleted ??= t.app.inject({ method: 'DELETE', url: `/api/admin/institution/${inst.id}`, headers: bearer(root) });
      });
      const res = await ask(token, { id: 31, inputs: ['tell me a long story'], requestArgs: { socketId: socket.id } });
      assert.ok(deleted, 'the answer streamed');
      const del = await deleted;
      assert.equal(del.statusCode, 200, del.body);
      assert.equal(res.statusCode, 409, res.body);
      const conflict = res.json().message as string;
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(socket.connected, true, 'the socket of the (still valid) session stays connected');
      assert.ok(events.filter((e) => !e.done).length > 0, 'chunks were streamed');
      assert.match(conflict, /deleted while it was being generated/);
      const last = events.at(-1)!;
      assert.equal(
        last.done,
        true,
        `the stream ended without a last event: ${events.length} events, last ${JSON.stringify(last)}; the HTTP answer was ${res.statusCode} ${res.json().error?.code}: ${conflict}`,
      );
      assert.deepEqual([last.chunk, last.error, typeof last.usage], ['', conflict, 'number']);
    } finally {
      stub.streamChunkDelayMs(0);
    }
  });

  /**
   * The history record's streamingFailed (POST /api/user/histories) is written in the payment's transaction, and the
   * last event is emitted after it commits; a socket found gone then made the response say streamingFailed: true
   * while the record said false. The socket is dropped here at exactly that point, as the last event is about to go.
   */
  test('a socket lost after the payment commits: the history record agrees with the response on streamingFailed', async () => {
    const token = (await login(t.app, w.userA1.email)).accessToken;
    await t.database.db.execute(sql`update institutions set credits = 100 where id = ${w.a1.id}`);
    stub.setChatHandler(() => ({ content: 'one two three four five six seven eight nine', usage: { prompt_tokens: 10, completion_tokens: 9 } }));
    const socket = await openSocket(token);
    const events: StreamEvent[] = [];
    socket.on('RECEIVE_STREAM', (e: StreamEvent) => events.push(e));
    const serverSocket = t.app.realtime.io.sockets.sockets.get(socket.id!)!;
    assert.ok(serverSocket);
    // the socket vanishes as the last event is about to go: the payment has committed
    let armed = false;
    const realtime = t.app.realtime;
    const sinkFor = realtime.sinkFor.bind(realtime);
    realtime.sinkFor = async (...args: Parameters<typeof sinkFor>) => {
      const sink = await sinkFor(...args);
      if (!sink) return sink;
      return {
        ...sink,
        emit: (payload) => {
          if (armed && payload.done) {
            armed = false;
            serverSocket.disconnect(true);
          }
          return sink.emit(payload);
        },
      };
    };
    const stop = () => (realtime.sinkFor = sinkFor);
    try {
      armed = true;
      const res = await ask(token, { id: 32, inputs: ['count to nine'], requestArgs: { socketId: socket.id } });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(armed, false, 'the hook ran');
      const body = res.json();
      assert.equal(body.streamingFailed, true, 'the response says the stream failed (the last event could not be sent)');
      const [row] = await rowsOf<{ streaming_failed: boolean; streamed: boolean }>(t.database.db, sql`select streaming_failed, streamed from histories where id = ${body.historyId}`);
      const listed = await t.app.inject({ method: 'POST', url: '/api/user/histories', headers: { 'x-access-token': token }, payload: { historyId: body.historyId } });
      assert.equal(listed.statusCode, 200, listed.body);
      const record = listed.json().data[0];
      assert.equal(
        record.streamingFailed,
        body.streamingFailed,
        `the response says streamingFailed ${body.streamingFailed} but the saved record says ${record.streamingFailed} (row ${JSON.stringify(row)}); the client got ${events.length} events, the last ${JSON.stringify(events.at(-1))}`,
      );
    } finally {
      stop();
    }
  });

  /**
   * The same without any hook: the client drops its socket as soon as it has the last words of the answer (a user
   * closing the tab). With the embedded database in its worker thread (as in production) the disconnect reaches the
   * server while the payment's transaction runs.
   */
  test('a client that disconnects on receiving the last chunk: the saved record agrees with the response on streamingFailed', async () => {
    const token = (await login(t.app, w.userA1.email)).accessToken;
    await t.database.db.execute(sql`update institutions set credits = 100 where id = ${w.a1.id}`);
    stub.setChatHandler(() => ({ content: 'one two three four five six seven eight nine', usage: { prompt_tokens: 10, completion_tokens: 9 } }));
    const socket = await openSocket(token);
    socket.on('RECEIVE_STREAM', (e: StreamEvent) => {
      if (e.chunk.includes('nine')) socket.disconnect();
    });
    const res = await ask(token, { id: 41, inputs: ['count to nine'], requestArgs: { socketId: socket.id } });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    const listed = await t.app.inject({ method: 'POST', url: '/api/user/histories', headers: { 'x-access-token': token }, payload: { historyId: body.historyId } });
    const record = listed.json().data[0];
    assert.equal(record.streamingFailed, body.streamingFailed, `response streamingFailed ${body.streamingFailed} (${body.streamingError}), saved record ${record.streamingFailed}`);
  });
});
