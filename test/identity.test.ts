import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eq } from 'drizzle-orm';
import { SignJWT } from 'jose';
import { sessions } from '../src/db/schema.js';
import { updateUser } from '../src/modules/identity/identity.repository.js';
import { ManualClock } from '../src/shared/clock.js';
import { bearer, login, makeAccount, makeInstitution, makeUser, makeWorld, PASSWORD, startTestApp, type TestApp } from './support/app.js';

describe('identity: login, tokens, sessions, me', () => {
  let t: TestApp;
  let world: Awaited<ReturnType<typeof makeWorld>>;
  const clock = new ManualClock(new Date('2026-11-01T10:00:00Z'));

  before(async () => {
    t = await startTestApp({ clock, env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '1000' } });
    world = await makeWorld(t.database);
  });
  after(() => t.close());

  test('login happy path returns a token pair and the user', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: world.userA1.email.toUpperCase(), password: PASSWORD } });
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.equal(body.success, true);
    assert.match(body.accessToken, /^[\w-]+\.[\w-]+\.[\w-]+$/);
    assert.ok(body.refreshToken.length > 40);
    assert.equal(body.expiresIn, 900);
    assert.equal(body.user.email, world.userA1.email);
    assert.equal(body.user.institution, world.a1.id);
    assert.equal(body.user.passwordHash, undefined);
    // a pasted address with spaces around it is the same address
    const padded = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: ` ${world.userA1.email}\t`, password: PASSWORD } });
    assert.equal(padded.statusCode, 200, padded.body);
    assert.equal(padded.json().user.email, world.userA1.email);
  });

  test('wrong password and unknown e-mail give the same 401', async () => {
    const wrong = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: world.userA1.email, password: 'nope-nope' } });
    const unknown = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'ghost@example.com', password: 'nope-nope' } });
    assert.equal(wrong.statusCode, 401);
    assert.equal(unknown.statusCode, 401);
    assert.deepEqual(wrong.json(), unknown.json());
    assert.deepEqual(wrong.json(), { success: false, message: 'Invalid e-mail or password', error: { code: 'UNAUTHENTICATED', details: [] } });
  });

  test('a disabled user cannot log in, and their live tokens stop working', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
    const { accessToken } = await login(t.app, user.email);
    await updateUser(t.database.db, user.id, { status: 'disabled' }, new Date());
    const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD } });
    assert.equal(res.statusCode, 403);
    assert.equal(res.json().error.code, 'FORBIDDEN');
    const me = await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) });
    assert.equal(me.statusCode, 401);
  });

  test('both token headers are accepted', async () => {
    const { accessToken } = await login(t.app, world.userA1.email);
    const viaBearer = await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) });
    const viaCustom = await t.app.inject({ method: 'GET', url: '/api/user/me', headers: { 'x-access-token': accessToken } });
    assert.equal(viaBearer.statusCode, 200);
    assert.equal(viaCustom.statusCode, 200);
    assert.equal(viaCustom.json().data._id, world.userA1.id);
  });

  test('refresh rotates; reusing an old refresh token revokes the session', async () => {
    const first = await login(t.app, world.userA2.email);
    const r1 = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: first.refreshToken } });
    assert.equal(r1.statusCode, 200);
    const second = r1.json();
    assert.notEqual(second.refreshToken, first.refreshToken);
    // the new access token works
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(second.accessToken) })).statusCode, 200);
    // reuse of the first refresh token: 401 and the whole session ends
    const reuse = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: first.refreshToken } });
    assert.equal(reuse.statusCode, 401);
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: second.refreshToken } })).statusCode, 401);
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(second.accessToken) })).statusCode, 401);
  });

  test('a garbage refresh token is a 401, a missing one a 400', async () => {
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: 'garbage' } })).statusCode, 401);
    const missing = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: {} });
    assert.equal(missing.statusCode, 400);
    assert.equal(missing.json().error.code, 'VALIDATION_FAILED');
  });

  test('logout revokes the session: the old access token is rejected', async () => {
    const { accessToken, refreshToken } = await login(t.app, world.userA1.email);
    const out = await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(accessToken) });
    assert.equal(out.statusCode, 200);
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) })).statusCode, 401);
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken } })).statusCode, 401);
  });

  test('an expired access token is a 401 with the contract body', async () => {
    const { accessToken } = await login(t.app, world.userA1.email);
    clock.advance(16 * 60 * 1000);
    try {
      const res = await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) });
      assert.equal(res.statusCode, 401);
      assert.deepEqual(res.json(), { success: false, message: 'Access token expired', error: { code: 'UNAUTHENTICATED', details: [] } });
    } finally {
      clock.advance(-16 * 60 * 1000);
    }
  });

  test('a token signed with another key, or no token, is a 401', async () => {
    const forged = await new SignJWT({ sid: 'x', typ: 'access' }).setProtectedHeader({ alg: 'HS256' }).setSubject(world.superadmin.id).setExpirationTime('1h').sign(new TextEncoder().encode('another-secret-another-secret-another-secret'));
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(forged) })).statusCode, 401);
    const none = await t.app.inject({ method: 'GET', url: '/api/user/me' });
    assert.equal(none.statusCode, 401);
    assert.equal(none.json().error.code, 'UNAUTHENTICATED');
  });

  test('PATCH /api/user/me updates the profile and validates the time zone', async () => {
    const { accessToken } = await login(t.app, world.userA1.email);
    const ok = await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { fname: 'Marie', location: 'Paris', timezone: 'Europe/Paris', ignored: 1 } });
    assert.equal(ok.statusCode, 200);
    assert.equal(ok.json().data.fname, 'Marie');
    assert.equal(ok.json().data.timezone, 'Europe/Paris');
    const bad = await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { timezone: 'Mars/Olympus' } });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.details[0].field, 'timezone');
    const wrongType = await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { fname: 42 } });
    assert.equal(wrongType.statusCode, 400);
    assert.equal(wrongType.json().error.code, 'VALIDATION_FAILED');
    assert.equal(wrongType.json().error.details[0].field, 'fname');
  });

  test('changing the password needs the current one and ends every other session', async () => {
    const user = await makeUser(t.database, { accountId: world.accountA.id, memberships: { [world.a1.id]: 'user' } });
    const here = await login(t.app, user.email);
    const elsewhere = await login(t.app, user.email);
    const denied = await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(here.accessToken), payload: { password: 'brand-new-password' } });
    assert.equal(denied.statusCode, 403);
    const ok = await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(here.accessToken), payload: { password: 'brand-new-password', currentPassword: PASSWORD } });
    assert.equal(ok.statusCode, 200);
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(here.accessToken) })).statusCode, 200);
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(elsewhere.accessToken) })).statusCode, 401);
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: elsewhere.refreshToken } })).statusCode, 401);
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD } })).statusCode, 401);
    await login(t.app, user.email, 'brand-new-password');
  });

  test('institutions list and switch: new token pair carries the new institution; not enrolled → 403', async () => {
    const user = await makeUser(t.database, { accountId: world.accountA.id, memberships: { [world.a1.id]: 'user', [world.a2.id]: 'admin' } });
    const { accessToken } = await login(t.app, user.email);
    const list = await t.app.inject({ method: 'GET', url: '/api/user/institutions', headers: bearer(accessToken) });
    assert.equal(list.statusCode, 200);
    const data = list.json().data as Array<{ _id: string; role: string; current: boolean }>;
    assert.deepEqual(data.map((d) => d._id).sort(), [world.a1.id, world.a2.id].sort());
    assert.equal(data.find((d) => d.current)?._id, world.a1.id);
    const sw = await t.app.inject({ method: 'POST', url: '/api/user/institution/switch', headers: bearer(accessToken), payload: { institution: world.a2.id } });
    assert.equal(sw.statusCode, 200);
    assert.equal(sw.json().user.institution, world.a2.id);
    const list2 = await t.app.inject({ method: 'GET', url: '/api/user/institutions', headers: bearer(sw.json().accessToken) });
    assert.equal((list2.json().data as Array<{ _id: string; current: boolean }>).find((d) => d.current)?._id, world.a2.id);
    const denied = await t.app.inject({ method: 'POST', url: '/api/user/institution/switch', headers: bearer(accessToken), payload: { institution: world.b1.id } });
    assert.equal(denied.statusCode, 403);
  });

  // ───────────── logout while the identity policy refuses the user ─────────────

  const me = (token: string) => t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(token) });
  const logout = (token: string) => t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(token) });
  const refresh = (refreshToken: string) => t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken } });
  /** The session row of a token pair (a refresh token is `<sessionId>.<secret>`). */
  const sessionOf = async (pair: { refreshToken: string }) => (await t.database.db.select().from(sessions).where(eq(sessions.id, pair.refreshToken.split('.')[0]!)))[0]!;
  type Pair = { accessToken: string; refreshToken: string };
  /**
   * After a 200 logout of `ending`: its session is revoked as a logout and `other` is not; once `reactivate` has run,
   * neither the ended session's refresh nor its access token works, while `other` works and refreshes.
   */
  const assertLoggedOutForGood = async (ending: Pair, other: Pair, reactivate: () => Promise<void>) => {
    const row = await sessionOf(ending);
    assert.equal(row.revokedReason, 'logout');
    assert.ok(row.revokedAt instanceof Date);
    assert.equal((await sessionOf(other)).revokedAt, null, 'only the presented session ends');
    await reactivate();
    assert.equal((await refresh(ending.refreshToken)).statusCode, 401);
    const old = await me(ending.accessToken);
    assert.equal(old.statusCode, 401);
    assert.equal(old.json().message, 'Session has ended');
    // the session it left alone works again, refresh included
    assert.equal((await me(other.accessToken)).statusCode, 200);
    assert.equal((await refresh(other.refreshToken)).statusCode, 200);
  };

  test('a user whose account is inactive logs out: that session is revoked, and once the account is active again neither its refresh nor its access token works', async () => {
    const root = (await login(t.app, world.superadmin.email)).accessToken;
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
    const ending = await login(t.app, user.email);
    const other = await login(t.app, user.email);
    assert.equal((await me(ending.accessToken)).statusCode, 200);
    const setStatus = async (status: 'active' | 'inactive') => {
      const res = await t.app.inject({ method: 'PATCH', url: `/api/admin/account/${account.id}`, headers: bearer(root), payload: { status } });
      assert.equal(res.statusCode, 200, res.body);
    };
    await setStatus('inactive');
    // refused on every other route, as before
    const refused = await me(ending.accessToken);
    assert.equal(refused.statusCode, 401);
    assert.equal(refused.json().message, 'The account of this user is inactive');
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/institutions', headers: { 'x-access-token': ending.accessToken } })).statusCode, 401);

    const out = await logout(ending.accessToken);
    assert.equal(out.statusCode, 200, out.body);
    assert.deepEqual(out.json(), { success: true, message: 'Logged out' });
    // the session has ended: a second logout is a 401
    assert.equal((await logout(ending.accessToken)).statusCode, 401);
    await assertLoggedOutForGood(ending, other, () => setStatus('active'));
  });

  test('a disabled user logs out likewise: that session is revoked, and once enabled again neither its refresh nor its access token works', async () => {
    const user = await makeUser(t.database, { accountId: world.accountA.id, memberships: { [world.a1.id]: 'user' } });
    const ending = await login(t.app, user.email);
    const other = await login(t.app, user.email);
    assert.equal((await me(ending.accessToken)).statusCode, 200);
    // disabled by a direct write, announced as every write is (the admin API's disabling ends every session itself)
    const setStatus = async (status: 'active' | 'disabled') => {
      await updateUser(t.database.db, user.id, { status }, new Date());
      t.app.ctx.auth.cache.invalidateUser(user.id);
    };
    await setStatus('disabled');
    const refused = await me(ending.accessToken);
    assert.equal(refused.statusCode, 401);
    assert.equal(refused.json().message, 'This user is disabled');

    const out = await logout(ending.accessToken);
    assert.equal(out.statusCode, 200, out.body);
    await assertLoggedOutForGood(ending, other, () => setStatus('active'));
  });
});

describe('login rate limits', () => {
  let t: TestApp;
  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '3', LOGIN_RATE_LIMIT_PER_IP: '5' } });
  });
  after(() => t.close());

  test('per e-mail, then per IP: 429 with Retry-After and the contract body', async () => {
    const attempt = (email: string) => t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email, password: 'wrong-password' } });
    for (let i = 0; i < 3; i++) assert.equal((await attempt('victim@example.com')).statusCode, 401);
    const limited = await attempt('victim@example.com');
    assert.equal(limited.statusCode, 429);
    assert.ok(Number(limited.headers['retry-after']) >= 1);
    assert.equal(limited.json().error.code, 'RATE_LIMITED');
    // other e-mails from the same IP still get through until the IP budget (5) is spent
    assert.equal((await attempt('other@example.com')).statusCode, 401);
    assert.equal((await attempt('third@example.com')).statusCode, 429);
  });
});
