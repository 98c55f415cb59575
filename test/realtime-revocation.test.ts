import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import type { Database } from '../src/db/client.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { ClientSockets, listenLocally, stubModelEnv, waitFor, workerDatabase } from './support/realtime.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

/**
 * Contract §2: "Revoked sessions are rejected at once." A logout publishes the session's invalidation before it
 * answers; the gateway checks the session's sockets again, and until that check is back the chunks of an answer
 * streaming to them wait (delivered if the check passes, dropped with the socket if not). Before, the check was
 * only started there and chunks kept going out to the logged-out socket after POST /api/auth/logout answered 200.
 *
 * The database runs in its worker thread as in production; the emits are counted on the server-side socket
 * (not on the client, so that chunks already in flight on the network are not counted).
 */
describe('realtime: no answer chunk reaches a socket after its session was revoked', () => {
  let t: TestApp;
  let w: World;
  let stub: OpenAiStub;
  let database: Database;
  let base = '';
  const sockets = new ClientSockets();

  before(async () => {
    stub = await startOpenAiStub();
    database = await workerDatabase();
    t = await startTestApp({ database, env: stubModelEnv(stub) });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
    await t.database.db.execute(sql`update institutions set credits = 1000 where id = ${w.a1.id}`);
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
    await database.close();
    await stub.close();
  });

  test('no RECEIVE_STREAM is emitted to a socket after its session’s logout has answered', async () => {
    stub.setChatHandler(() => Array.from({ length: 600 }, (_, i) => `w${i}`).join(' '));
    stub.streamChunkDelayMs(1);
    const runs: Array<{ afterLogout: number; total: number; sessionEndedAfterMs: number }> = [];
    try {
      for (let run = 0; run < 3; run++) {
        const ending = await login(t.app, w.userA1.email);
        const socket = await sockets.open(base, ending.accessToken);
        const server = t.app.realtime.io.sockets.sockets.get(socket.id!)!;
        const emitted: Array<{ event: string; at: number }> = [];
        const emit = server.emit.bind(server);
        server.emit = ((event: string, ...args: unknown[]) => {
          emitted.push({ event, at: performance.now() });
          return emit(event, ...(args as []));
        }) as typeof server.emit;

        let loggedOutAt = Number.POSITIVE_INFINITY;
        let logout: Promise<{ statusCode: number }> | undefined;
        socket.on('RECEIVE_STREAM', () => {
          logout ??= t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(ending.accessToken) }).then((res) => {
            loggedOutAt = performance.now();
            return res;
          });
        });
        const res = await t.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': ending.accessToken }, payload: { id: run, inputs: ['long'], requestArgs: { socketId: socket.id } } });
        assert.equal(res.statusCode, 200, res.body);
        assert.ok(logout, 'the answer streamed');
        assert.equal((await logout).statusCode, 200);
        // the logout ends the socket (SESSION_ENDED), checked after its answer: waited for, so that a run always shows it
        await waitFor(() => emitted.some((e) => e.event === 'SESSION_ENDED'), 'SESSION_ENDED after the logout');
        const chunks = emitted.filter((e) => e.event === 'RECEIVE_STREAM');
        const sessionEnded = emitted.find((e) => e.event === 'SESSION_ENDED');
        runs.push({ afterLogout: chunks.filter((e) => e.at > loggedOutAt).length, total: chunks.length, sessionEndedAfterMs: Math.round(((sessionEnded?.at ?? NaN) - loggedOutAt) * 10) / 10 });
      }
    } finally {
      stub.streamChunkDelayMs(0);
    }
    assert.deepEqual(
      runs.filter((r) => r.afterLogout > 0),
      [],
      `RECEIVE_STREAM emits to the logged-out socket after the logout answered 200, per run: ${JSON.stringify(runs)}`,
    );
  });
});
