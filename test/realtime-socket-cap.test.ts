import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket as ClientSocket } from 'socket.io-client';
import { TOO_MANY_SOCKETS } from '../src/modules/realtime/gateway.js';
import { ClientSockets, listenLocally, waitFor } from './support/realtime.js';
import { login, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

/** SOCKETS_PER_USER: the sockets one user may hold open on a node; other users are not affected. */
describe('realtime: sockets per user', () => {
  const cap = 3;
  let t: TestApp;
  let w: World;
  let base = '';
  const sockets = new ClientSockets();

  before(async () => {
    t = await startTestApp({ env: { SOCKETS_PER_USER: String(cap), LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '1000' } });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
  });

  /** The user's sockets connected on the server. */
  const held = (userId: string) => [...t.app.realtime.io.sockets.sockets.values()].filter((s) => (s.data as { userId?: string }).userId === userId).length;
  const settle = () => new Promise((r) => setTimeout(r, 200));

  /** How one more connection attempt ends: connected and kept, refused in the handshake, or connected and closed at once. */
  function attempt(token: string): Promise<{ socket: ClientSocket; outcome: 'kept' | 'refused' | 'closed'; message?: string }> {
    const socket = sockets.unconnected(base, { auth: { token } });
    return new Promise((resolve) => {
      let told: string | undefined;
      socket.once(TOO_MANY_SOCKETS, (e: { message: string }) => (told = e.message));
      socket.once('connect_error', (err: Error & { data?: { message?: string } }) => {
        assert.equal(err.message, TOO_MANY_SOCKETS);
        resolve({ socket, outcome: 'refused', message: err.data?.message });
      });
      socket.once('connect', () => {
        // a socket closed by the cap is closed right after it connected; one kept stays
        const timer = setTimeout(() => resolve({ socket, outcome: 'kept' }), 300);
        socket.once('disconnect', () => {
          clearTimeout(timer);
          resolve({ socket, outcome: 'closed', message: told });
        });
      });
    });
  }

  test('the user past the cap is refused with TOO_MANY_SOCKETS; another user is not; a closed socket frees a place', async () => {
    const a = (await login(t.app, w.userA1.email)).accessToken;
    const b = (await login(t.app, w.userA2.email)).accessToken;
    const mine: ClientSocket[] = [];
    for (let i = 0; i < cap; i++) mine.push(await sockets.open(base, a));
    const over = await attempt(a);
    assert.equal(over.outcome, 'refused');
    assert.match(over.message ?? '', new RegExp(`At most ${cap} connections per user`));
    // a second login of the same user counts too: the cap is per user, not per session
    const again = (await login(t.app, w.userA1.email)).accessToken;
    assert.equal((await attempt(again)).outcome, 'refused');
    // another user is not affected
    for (let i = 0; i < cap; i++) assert.equal((await attempt(b)).outcome, 'kept');
    assert.equal(held(w.userA2.id), cap);
    assert.equal(held(w.userA1.id), cap);
    // one closed: one place again
    mine[0]!.disconnect();
    await waitFor(() => held(w.userA1.id) === cap - 1, 'the closed socket to leave the server');
    assert.equal((await attempt(a)).outcome, 'kept');
    assert.equal(held(w.userA1.id), cap);
  });

  test('a burst of handshakes together never leaves more than the cap connected', async () => {
    const token = (await login(t.app, w.userB1.email)).accessToken;
    const outcomes = await Promise.all(Array.from({ length: cap + 7 }, () => attempt(token)));
    await settle();
    const kept = outcomes.filter((o) => o.outcome === 'kept' && o.socket.connected);
    assert.equal(kept.length, cap, JSON.stringify(outcomes.map((o) => o.outcome)));
    assert.equal(held(w.userB1.id), cap);
    for (const o of outcomes.filter((x) => x.outcome === 'closed')) assert.match(o.message ?? '', /At most/);
  });
});
