import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import type { Socket as ClientSocket } from 'socket.io-client';
import { ManualClock } from '../src/shared/clock.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { ClientSockets, endOf, listenLocally, stubModelEnv, type StreamEvent } from './support/realtime.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

/**
 * A socket is authenticated at its handshake "exactly like an HTTP request (session not revoked or expired, user
 * active)", and checked again when an invalidation names it. A session that reaches its expiresAt publishes
 * nothing: an answer asked from another session of the same user streamed to the socket of the expired session,
 * whose own HTTP requests were already refused with 401 "Session has expired". The sink now checks the socket's
 * session, as an HTTP request would be.
 */
describe('realtime: a socket of a session that has expired', () => {
  const clock = new ManualClock(Date.now());
  let t: TestApp;
  let w: World;
  let stub: OpenAiStub;
  let base = '';
  const sockets = new ClientSockets();

  before(async () => {
    stub = await startOpenAiStub();
    // sessions (refresh tokens) last 5 minutes, access tokens 1 minute
    t = await startTestApp({ clock, env: stubModelEnv(stub, { REFRESH_TOKEN_TTL_SECONDS: '300', ACCESS_TOKEN_TTL_SECONDS: '60' }) });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
    await t.database.db.execute(sql`update institutions set credits = 100 where id = ${w.a1.id}`);
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
    await stub.close();
  });

  const openSocket = (token: string): Promise<ClientSocket> => sockets.open(base, token);

  test('an answer is not streamed to the socket of an expired session', async () => {
    // session 1 (a kiosk / shared computer) opens a socket and is then left alone
    const first = await login(t.app, w.userA1.email);
    const kiosk = await openSocket(first.accessToken);
    const seen: StreamEvent[] = [];
    kiosk.on('RECEIVE_STREAM', (e: StreamEvent) => seen.push(e));

    clock.advance(200_000);
    const second = await login(t.app, w.userA1.email); // session 2, elsewhere; expires 200 s after session 1
    clock.advance(150_000); // session 1 is now past its expiresAt (300 s), session 2 is not

    // session 1 has ended for HTTP
    const refresh = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: first.refreshToken } });
    assert.equal(refresh.statusCode, 401, refresh.body);
    const fresh = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: second.refreshToken } });
    assert.equal(fresh.statusCode, 200, fresh.body);
    const token = fresh.json().accessToken as string;
    const me = await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(token) });
    assert.equal(me.statusCode, 200, me.body);

    stub.setChatHandler(() => 'the private answer asked from session 2');
    const ended = endOf(kiosk);
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/ai/personal/qanda',
      headers: { 'x-access-token': token },
      payload: { id: 5, inputs: ['something private'], requestArgs: { socketId: kiosk.id } },
    });
    assert.equal(res.statusCode, 200, res.body);
    // the answer looked for the kiosk's socket, found its session over and ended it: nothing went to it
    assert.match((await ended).message ?? '', /./, 'the expired session\'s socket is told why it ends');
    assert.deepEqual(
      seen.map((e) => e.chunk).join(''),
      '',
      `the socket of the expired session received ${seen.length} RECEIVE_STREAM events of an answer asked from another session`,
    );
  });
});
