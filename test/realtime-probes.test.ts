import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import type { Socket as ClientSocket, ManagerOptions, SocketOptions } from 'socket.io-client';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { ClientSockets, endOf, listenLocally, stubModelEnv, type StreamEvent } from './support/realtime.js';
import { bearer, login, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

/**
 * An attacker's probes of the realtime gateway: who can be streamed to, handshake refusals, sockets ended with their
 * session, hostile payloads.
 */
describe('realtime: an attacker\'s probes', () => {
  let t: TestApp;
  let w: World;
  let stub: OpenAiStub;
  let base = '';
  const sockets = new ClientSockets();

  before(async () => {
    stub = await startOpenAiStub();
    t = await startTestApp({ env: stubModelEnv(stub, { PASSWORD_CHECK_RATE_LIMIT_PER_USER: '1000' }) });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
    await t.database.db.execute(sql`update institutions set credits = 1000`);
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
    await stub.close();
  });

  function attempt(opts: Partial<ManagerOptions & SocketOptions>): Promise<{ socket: ClientSocket; error?: Error }> {
    const socket = sockets.unconnected(base, opts);
    return new Promise((resolve) => {
      socket.once('connect', () => resolve({ socket }));
      socket.once('connect_error', (error) => resolve({ socket, error }));
    });
  }
  const openSocket = (token: string): Promise<ClientSocket> => sockets.open(base, token);
  function record(socket: ClientSocket): StreamEvent[] {
    const seen: StreamEvent[] = [];
    socket.on('RECEIVE_STREAM', (e: StreamEvent) => seen.push(e));
    return seen;
  }
  const ask = (token: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    t.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token, ...headers }, payload: body });
  const settle = () => new Promise((r) => setTimeout(r, 150));

  test('handshake refusals: missing, garbage, refresh token, token only in the query, prototype keys, non-string, huge, expired', async () => {
    const session = await login(t.app, w.userA1.email);
    const expired = await t.app.ctx.tokens.signAccess(
      { userId: w.userA1.id, sessionId: JSON.parse(Buffer.from(session.accessToken.split('.')[1]!, 'base64url').toString()).sid, institutionId: w.a1.id },
      new Date(Date.now() - 3_600_000),
    );
    const cases: Array<[string, Partial<ManagerOptions & SocketOptions>]> = [
      ['no auth', {}],
      ['garbage', { auth: { token: 'garbage' } }],
      ['refresh token', { auth: { token: session.refreshToken } }],
      ['token in the query only', { query: { token: session.accessToken } }],
      ['__proto__ key', { auth: JSON.parse(`{"__proto__": {"token": "${session.accessToken}"}}`) }],
      ['non-string token', { auth: { token: { toString: session.accessToken } } as never }],
      ['array token', { auth: { token: [session.accessToken] } as never }],
      ['huge token', { auth: { token: 'x'.repeat(60_000) } }],
      ['expired access token', { auth: { token: expired } }],
    ];
    for (const [name, opts] of cases) {
      const { error } = await attempt(opts);
      assert.ok(error, `${name}: connected`);
      assert.equal(error.message, 'UNAUTHENTICATED', `${name}: ${error.message}`);
    }
    // a handshake over the 64 KB a client message may hold: the connection is closed, nothing connects
    const oversized = sockets.unconnected(base, { auth: { token: 'x'.repeat(100_000) } });
    let connected = false;
    oversized.once('connect', () => (connected = true));
    await new Promise((resolve) => oversized.io.once('close', resolve));
    assert.equal(connected, false);
    // a "Bearer " prefix in auth.token is accepted
    const ok = await attempt({ auth: { token: `Bearer ${session.accessToken}` } });
    assert.equal(ok.error, undefined);
    const health = await t.app.inject({ method: 'GET', url: '/healthz' });
    assert.equal(health.statusCode, 200);
  });

  test('hostile client events (unknown names, huge, RECEIVE_STREAM itself, prototype keys, bad packets) reach nobody and leave the server healthy', async () => {
    const a = (await login(t.app, w.userA1.email)).accessToken;
    const b = (await login(t.app, w.userB1.email)).accessToken;
    const attacker = await openSocket(a);
    const victim = await openSocket(b);
    const victimSeen = record(victim);
    let victimOther = 0;
    victim.onAny(() => victimOther++);
    attacker.emit('RECEIVE_STREAM', { id: 1, chunk: 'forged', index: 0, done: false });
    attacker.emit('__proto__', JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"prototype": {"polluted": true}}}'));
    attacker.emit('constructor', { prototype: { polluted: true } });
    attacker.emit('message', 'x'.repeat(50_000)); // under the 64 KB a message may hold: ignored
    await settle();
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    // over the 64 KB a message may hold (maxHttpBufferSize): that client is dropped, nobody else
    const big = await openSocket(a);
    const bigGone = new Promise((r) => big.once('disconnect', r));
    big.emit('huge', 'x'.repeat(70_000));
    await bigGone;
    // a malformed Socket.IO packet on the raw engine: that client is dropped
    const raw = await openSocket(a);
    const rawGone = new Promise((r) => raw.once('disconnect', r));
    (raw.io.engine as unknown as { write(s: string): void }).write('2["unterminated');
    await rawGone;
    await settle();
    assert.deepEqual(victimSeen, []);
    assert.equal(victimOther, 0);
    assert.equal(victim.connected, true);
    assert.equal(attacker.connected, true);
    stub.setChatHandler(() => 'still works');
    const res = await ask(a, { id: 3, inputs: ['hi'], requestArgs: { socketId: attacker.id } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().streamingFailed, false);
  });

  test('socket ids that are not the caller’s: other user same institution, other tenant, an admin’s, and a socket re-authenticated as someone else', async () => {
    const a = (await login(t.app, w.userA1.email)).accessToken;
    const targets = {
      adminA1: await openSocket((await login(t.app, w.adminA1.email)).accessToken),
      accountAdminB: await openSocket((await login(t.app, w.accountAdminB.email)).accessToken),
      userB1: await openSocket((await login(t.app, w.userB1.email)).accessToken),
    };
    stub.setChatHandler(() => 'secret of A1');
    for (const [name, socket] of Object.entries(targets)) {
      const seen = record(socket);
      const res = await ask(a, { id: 4, inputs: ['hi'], requestArgs: { socketId: socket.id } });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().streamingFailed, false);
      await settle();
      assert.deepEqual(seen, [], name);
    }
    // A's socket re-authenticates as B (same client object): A's old id no longer streams anywhere
    const switching = await openSocket(a);
    const oldId = switching.id!;
    const seen = record(switching);
    switching.disconnect();
    switching.auth = { token: (await login(t.app, w.userB1.email)).accessToken };
    await new Promise<void>((resolve, reject) => {
      switching.once('connect', () => resolve());
      switching.once('connect_error', reject);
      switching.connect();
    });
    assert.notEqual(switching.id, oldId);
    const res = await ask(a, { id: 5, inputs: ['hi'], requestArgs: { socketId: oldId } });
    assert.equal(res.statusCode, 200);
    // and A naming B's new id is refused too
    const res2 = await ask(a, { id: 6, inputs: ['hi'], requestArgs: { socketId: switching.id } });
    assert.equal(res2.statusCode, 200);
    await settle();
    assert.deepEqual(seen, []);
  });

  test('idempotent replay: to another socket of the same user it streams; to another user’s socket it does not', async () => {
    const a = (await login(t.app, w.userA1.email)).accessToken;
    const own = await openSocket(a);
    const ownSeen = record(own);
    const other = await openSocket((await login(t.app, w.adminA1.email)).accessToken);
    const otherSeen = record(other);
    stub.setChatHandler(() => 'replayed words');
    const body = { id: 9, inputs: ['replay me'], requestArgs: { ragIgnore: true } };
    const first = await ask(a, body, { 'idempotency-key': 'audit-rt-1' });
    assert.equal(first.statusCode, 200, first.body);
    const toOther = await ask(a, { ...body, requestArgs: { ...body.requestArgs, socketId: other.id } }, { 'idempotency-key': 'audit-rt-1' });
    assert.equal(toOther.statusCode, 200, toOther.body);
    assert.equal(toOther.headers['idempotent-replayed'], 'true');
    const toOwn = await ask(a, { ...body, requestArgs: { ...body.requestArgs, socketId: own.id } }, { 'idempotency-key': 'audit-rt-1' });
    assert.equal(toOwn.statusCode, 200, toOwn.body);
    await settle();
    assert.deepEqual(otherSeen, []);
    assert.deepEqual(
      ownSeen.map((e) => ({ ...e })),
      [
        { id: 9, chunk: 'replayed words', index: 0, done: false },
        { id: 9, chunk: '', index: 1, done: true, usage: first.json().usage, credits: first.json().credits },
      ],
    );
    // another user replaying the same key is a new request of theirs, never A's answer
    const b = (await login(t.app, w.adminA1.email)).accessToken;
    stub.setChatHandler(() => 'admin words');
    const theirs = await ask(b, body, { 'idempotency-key': 'audit-rt-1' });
    assert.equal(theirs.statusCode, 200);
    assert.deepEqual(theirs.json().outputs, ['admin words']);
  });

  test('many sockets of one user: only the named one receives; a logout closes every socket of that session only', async () => {
    const s1 = await login(t.app, w.userA2.email);
    const s2 = await login(t.app, w.userA2.email);
    const ofS1 = await Promise.all(Array.from({ length: 12 }, () => openSocket(s1.accessToken)));
    const ofS2 = await Promise.all(Array.from({ length: 3 }, () => openSocket(s2.accessToken)));
    const seen = ofS1.map(record);
    await t.database.db.execute(sql`update users set credits = 100 where id = ${w.userA2.id}`);
    await t.database.db.execute(sql`update institutions set pool_credits = true where id = ${w.a2.id}`);
    stub.setChatHandler(() => 'only the fifth');
    const res = await ask(s2.accessToken, { id: 11, inputs: ['hi'], requestArgs: { socketId: ofS1[4]!.id } });
    assert.equal(res.statusCode, 200, res.body);
    await settle();
    seen.forEach((events, i) => assert.equal(events.length > 0, i === 4, `socket ${i}`));
    const closing = ofS1.map(endOf);
    const out = await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(s1.accessToken) });
    assert.equal(out.statusCode, 200);
    for (const c of await Promise.all(closing)) assert.deepEqual(c, { message: 'Session has ended', reason: 'io server disconnect' });
    await settle();
    assert.ok(ofS2.every((s) => s.connected));
  });

  test('sockets end with refresh-token reuse, a disabled user, an admin password reset, and (other sessions) an own password change', async () => {
    const root = (await login(t.app, w.superadmin.email)).accessToken;
    // refresh-token reuse
    {
      const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
      const s = await login(t.app, user.email);
      const socket = await openSocket(s.accessToken);
      const closed = endOf(socket);
      const r1 = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: s.refreshToken } });
      assert.equal(r1.statusCode, 200);
      const r2 = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: s.refreshToken } });
      assert.equal(r2.statusCode, 401);
      assert.equal((await closed).reason, 'io server disconnect');
    }
    // disabled by an admin; the password reset by an admin (every session)
    for (const change of [{ status: 'disabled' }, { password: 'another long password 1' }]) {
      const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
      const socket = await openSocket((await login(t.app, user.email)).accessToken);
      const closed = endOf(socket);
      const res = await t.app.inject({ method: 'PATCH', url: `/api/admin/user/${user.id}`, headers: bearer(root), payload: change });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal((await closed).reason, 'io server disconnect', JSON.stringify(change));
    }
    // own password change: the other sessions' sockets end, this session's stay
    {
      const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
      const here = await login(t.app, user.email, user.password);
      const elsewhere = await login(t.app, user.email, user.password);
      const mine = await openSocket(here.accessToken);
      const theirs = await openSocket(elsewhere.accessToken);
      const closed = endOf(theirs);
      const res = await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(here.accessToken), payload: { currentPassword: user.password, password: 'a brand new password 22' } });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal((await closed).reason, 'io server disconnect');
      await settle();
      assert.equal(mine.connected, true);
    }
    // removed from the only institution: the session keeps its personal space (contract §2), the socket stays
    {
      const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
      const socket = await openSocket((await login(t.app, user.email)).accessToken);
      const res = await t.app.inject({ method: 'DELETE', url: '/api/admin/membership', headers: bearer(root), payload: { user: user.id, institution: w.a1.id } });
      assert.equal(res.statusCode, 200, res.body);
      await settle();
      assert.equal(socket.connected, true);
    }
  });

  test('a burst of refused handshakes leaves the server answering', async () => {
    const results = await Promise.all(Array.from({ length: 60 }, () => attempt({ auth: { token: 'nope' } })));
    assert.ok(results.every((r) => r.error?.message === 'UNAUTHENTICATED'));
    const health = await t.app.inject({ method: 'GET', url: '/healthz' });
    assert.equal(health.statusCode, 200);
  });
});
