import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eq } from 'drizzle-orm';
import { sessions } from '../src/db/schema.js';
import { AuthCache, type AuthInvalidation, type CachedAuth } from '../src/modules/identity/auth-cache.js';
import { InProcessChannel } from '../src/platform/invalidation-channel.js';
import { TokenService } from '../src/modules/identity/tokens.js';
import { ManualClock } from '../src/shared/clock.js';
import { bearer, login, makeAccount, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

/**
 * Every case first proves the session is served from the cache (a GET /me that is a hit, no query),
 * then makes the write through the API, then shows that the very next request sees it. Without the
 * invalidation in the write's code path each of these would answer from the stale entry.
 */
describe('auth cache: a session is authenticated without a query, and every write invalidates it at once', () => {
  let t: TestApp;
  let world: Awaited<ReturnType<typeof makeWorld>>;
  let root: string;
  const clock = new ManualClock(new Date('2026-11-02T09:00:00Z'));

  before(async () => {
    t = await startTestApp({
      clock,
      env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '1000', REFRESH_TOKEN_TTL_SECONDS: '3600', ACCESS_TOKEN_TTL_SECONDS: '7200',
        // entries live longer than sessions here, so that expiry is seen on a cached entry
        AUTH_CACHE_TTL_SECONDS: '86400' },
    });
    world = await makeWorld(t.database);
    root = (await login(t.app, world.superadmin.email)).accessToken;
  });
  after(() => t.close());

  const stats = () => t.app.ctx.auth.cache.snapshotStats();
  const me = (token: string) => t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(token) });
  const asRoot = (method: 'PATCH' | 'POST' | 'DELETE', url: string, payload: object) => t.app.inject({ method, url, headers: bearer(root), payload });

  /** Asserts that the session is in the cache now: a GET /me that costs no query. */
  async function assertCached(token: string): Promise<void> {
    await me(token);
    const before = stats();
    const res = await me(token);
    assert.equal(res.statusCode, 200);
    const now = stats();
    assert.equal(now.hits, before.hits + 1, 'the second GET /me was a cache hit');
    assert.equal(now.misses, before.misses, 'and no miss (no query)');
  }

  async function freshUser(memberships: Record<string, 'admin' | 'user'> = { [world.a1.id]: 'user' }, accountId = world.accountA.id) {
    const user = await makeUser(t.database, { accountId, memberships });
    return { user, ...(await login(t.app, user.email)) };
  }

  test('a hit answers GET /me from the cache; a garbage or foreign-user token is still refused', async () => {
    const { user, accessToken } = await freshUser();
    await assertCached(accessToken);
    const res = await me(accessToken);
    assert.equal(res.json().data._id, user.id);
    assert.equal((await me('garbage')).statusCode, 401);
  });

  test('logout: the session is refused at once', async () => {
    const { accessToken } = await freshUser();
    await assertCached(accessToken);
    const out = await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(accessToken) });
    assert.equal(out.statusCode, 200);
    assert.equal((await me(accessToken)).statusCode, 401);
  });

  test('refresh-token reuse: the session (and its access token) is refused at once', async () => {
    const { accessToken, refreshToken } = await freshUser();
    await assertCached(accessToken);
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken } })).statusCode, 200);
    assert.equal((await me(accessToken)).statusCode, 200, 'a rotation keeps the session');
    const reuse = await t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken } });
    assert.equal(reuse.statusCode, 401);
    assert.equal((await me(accessToken)).statusCode, 401);
  });

  test('own password change: other sessions refused at once, this one continues', async () => {
    const { user, accessToken } = await freshUser();
    const other = await login(t.app, user.email);
    await assertCached(accessToken);
    await assertCached(other.accessToken);
    const res = await t.app.inject({
      method: 'PATCH',
      url: '/api/user/me',
      headers: bearer(accessToken),
      payload: { currentPassword: user.password, password: 'a brand new password 1' },
    });
    assert.equal(res.statusCode, 200);
    assert.equal((await me(other.accessToken)).statusCode, 401);
    assert.equal((await me(accessToken)).statusCode, 200);
  });

  test('password reset by an admin: every session refused at once', async () => {
    const { user, accessToken } = await freshUser();
    await assertCached(accessToken);
    assert.equal((await asRoot('PATCH', `/api/admin/user/${user.id}`, { password: 'reset by admin 123' })).statusCode, 200);
    assert.equal((await me(accessToken)).statusCode, 401);
  });

  test('disable: refused at once', async () => {
    const { user, accessToken } = await freshUser();
    await assertCached(accessToken);
    assert.equal((await asRoot('PATCH', `/api/admin/user/${user.id}`, { status: 'disabled' })).statusCode, 200);
    const res = await me(accessToken);
    assert.equal(res.statusCode, 401);
  });

  test('global role change: new permissions apply to the next request', async () => {
    const { user, accessToken } = await freshUser();
    await assertCached(accessToken);
    const read = () => t.app.inject({ method: 'GET', url: `/api/admin/account/${world.accountA.id}`, headers: bearer(accessToken) });
    assert.equal((await read()).statusCode, 403);
    assert.equal((await asRoot('PATCH', `/api/admin/user/${user.id}`, { role: 'accountadmin' })).statusCode, 200);
    assert.equal((await read()).statusCode, 200);
    assert.equal((await me(accessToken)).json().data.role, 'accountadmin');
    assert.equal((await asRoot('PATCH', `/api/admin/user/${user.id}`, { role: 'user' })).statusCode, 200);
    assert.equal((await read()).statusCode, 403);
  });

  test('membership: enrol, role change and removal apply to the next request', async () => {
    const { user, accessToken } = await freshUser({ [world.a1.id]: 'user' });
    await assertCached(accessToken);
    const switchTo = (id: string) => t.app.inject({ method: 'POST', url: '/api/user/institution/switch', headers: bearer(accessToken), payload: { institution: id } });
    const listUsers = () => t.app.inject({ method: 'GET', url: `/api/admin/users?institution=${world.a2.id}`, headers: bearer(accessToken) });
    assert.equal((await switchTo(world.a2.id)).statusCode, 403);
    assert.equal((await listUsers()).statusCode, 403);

    assert.equal((await asRoot('POST', '/api/admin/membership', { user: user.id, institution: world.a2.id, role: 'user' })).statusCode, 201);
    assert.equal((await switchTo(world.a2.id)).statusCode, 200, 'enrolment seen at once');

    await assertCached(accessToken);
    assert.equal((await asRoot('POST', '/api/admin/membership', { user: user.id, institution: world.a2.id, role: 'admin' })).statusCode, 200);
    assert.equal((await listUsers()).statusCode, 200, 'promotion to institution admin seen at once');

    await assertCached(accessToken);
    assert.equal((await asRoot('DELETE', '/api/admin/membership', { user: user.id, institution: world.a2.id })).statusCode, 200);
    assert.equal((await listUsers()).statusCode, 403, 'removal seen at once');
    assert.equal((await switchTo(world.a2.id)).statusCode, 403);
  });

  test('credits top-up: GET /me shows the new balance at once', async () => {
    const { user, accessToken } = await freshUser();
    await assertCached(accessToken);
    const before = (await me(accessToken)).json().data.credits as number;
    assert.equal((await asRoot('POST', `/api/admin/user/${user.id}/credits`, { amount: 5 })).statusCode, 200);
    assert.equal((await me(accessToken)).json().data.credits, before + 5);
  });

  test('profile change through PATCH /me: every session of the user sees it at once', async () => {
    const { user, accessToken } = await freshUser();
    const other = await login(t.app, user.email);
    await assertCached(other.accessToken);
    assert.equal((await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { fname: 'Renamed' } })).statusCode, 200);
    assert.equal((await me(other.accessToken)).json().data.fname, 'Renamed');
  });

  test('institution status change drops the sessions of its members, and only theirs', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const member = await freshUser({ [inst.id]: 'user' }, account.id);
    const outsider = await freshUser();
    await assertCached(member.accessToken);
    await assertCached(outsider.accessToken);
    assert.equal((await asRoot('PATCH', `/api/admin/institution/${inst.id}`, { status: 'inactive' })).statusCode, 200);
    const s0 = stats();
    assert.equal((await me(member.accessToken)).statusCode, 401, 'its only institution is inactive: refused at once');
    assert.equal((await me(outsider.accessToken)).statusCode, 200);
    const s1 = stats();
    assert.equal(s1.misses, s0.misses + 1, "the member's session was read again");
    assert.equal(s1.hits, s0.hits + 1, "the outsider's was not touched");
    assert.equal((await asRoot('PATCH', `/api/admin/institution/${inst.id}`, { status: 'active' })).statusCode, 200);
    assert.equal((await me(member.accessToken)).statusCode, 200, 'reactivated: accepted again at once');
  });

  test("account status change drops the sessions of the account's users and members of its institutions", async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const home = await freshUser({}, account.id);
    // a user of another account who is a member of this account's institution
    const guest = await freshUser({ [inst.id]: 'user' });
    const outsider = await freshUser();
    for (const s of [home, guest, outsider]) await assertCached(s.accessToken);
    assert.equal((await asRoot('PATCH', `/api/admin/account/${account.id}`, { status: 'inactive' })).statusCode, 200);
    const s0 = stats();
    assert.equal((await me(home.accessToken)).statusCode, 401, 'a user of the inactive account: refused at once');
    assert.equal((await me(guest.accessToken)).statusCode, 401, 'a member whose only institution is in it: refused at once');
    assert.equal((await me(outsider.accessToken)).statusCode, 200);
    const s1 = stats();
    assert.equal(s1.misses, s0.misses + 2);
    assert.equal(s1.hits, s0.hits + 1);
  });

  test('deleting the user: refused at once', async () => {
    const { user, accessToken } = await freshUser();
    await assertCached(accessToken);
    assert.equal((await asRoot('DELETE', `/api/admin/user/${user.id}`, {})).statusCode, 200);
    assert.equal((await me(accessToken)).statusCode, 401);
  });

  test('session expiry is checked against the cached expiresAt on every request', async () => {
    const { accessToken } = await freshUser();
    await assertCached(accessToken);
    clock.advance(3600 * 1000 + 1000); // the session (1 h) ends; the access token (2 h) is still valid
    const s0 = stats();
    const res = await me(accessToken);
    assert.equal(res.statusCode, 401);
    assert.equal(res.json().message, 'Session has expired');
    assert.equal(stats().hits, s0.hits + 1, 'refused from the cached entry, without a query');
    root = (await login(t.app, world.superadmin.email)).accessToken; // the admin session expired as well
  });

  test('lastActivityAt: written off the request path, at most once a minute', async () => {
    const { accessToken } = await freshUser();
    const { sid: sessionId } = JSON.parse(Buffer.from(accessToken.split('.')[1]!, 'base64url').toString()) as { sid: string };
    const stored = async () => (await t.database.db.select({ at: sessions.lastActivityAt }).from(sessions).where(eq(sessions.id, sessionId)))[0]!.at.getTime();
    const activity = t.app.ctx.auth.activity;
    await activity.flush();
    const loginAt = await stored();

    clock.advance(30_000);
    await me(accessToken);
    assert.equal(activity.pendingCount, 0, 'nothing to write within the minute');

    clock.advance(31_000);
    const due = clock.now().getTime();
    assert.equal((await me(accessToken)).statusCode, 200);
    assert.equal(await stored(), loginAt, 'the answer did not wait for the write');
    assert.equal(activity.pendingCount, 1);
    await me(accessToken);
    await activity.flush();
    assert.equal(await stored(), due);

    clock.advance(20_000);
    await me(accessToken);
    assert.equal(activity.pendingCount, 0, 'not again within the minute');
    clock.advance(41_000);
    await me(accessToken);
    assert.equal(activity.pendingCount, 1);
    await activity.flush();
    assert.equal(await stored(), clock.now().getTime());
  });
});

describe('auth cache: two nodes on one database share an invalidation channel', () => {
  let a: TestApp;
  let b: TestApp;
  const channel = new InProcessChannel<AuthInvalidation>();

  before(async () => {
    a = await startTestApp({ build: { invalidationChannel: channel } });
    b = await startTestApp({ database: a.database, build: { invalidationChannel: channel } });
  });
  after(async () => {
    await b.close();
    await a.close();
  });

  test('a logout and a disable on node A take effect on node B at once', async () => {
    const account = await makeAccount(a.database);
    const user = await makeUser(a.database, { accountId: account.id });
    const admin = await makeUser(a.database, { accountId: account.id, role: 'superadmin' });
    const adminToken = (await login(a.app, admin.email)).accessToken;
    const s1 = await login(a.app, user.email);
    const s2 = await login(a.app, user.email);
    const onB = (token: string) => b.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(token) });
    for (const s of [s1, s2]) {
      await onB(s.accessToken);
      const hits = b.app.ctx.auth.cache.snapshotStats().hits;
      assert.equal((await onB(s.accessToken)).statusCode, 200);
      assert.equal(b.app.ctx.auth.cache.snapshotStats().hits, hits + 1, 'cached on B');
    }
    assert.equal((await a.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(s1.accessToken) })).statusCode, 200);
    assert.equal((await onB(s1.accessToken)).statusCode, 401);
    assert.equal((await onB(s2.accessToken)).statusCode, 200);
    const disable = await a.app.inject({ method: 'PATCH', url: `/api/admin/user/${user.id}`, headers: bearer(adminToken), payload: { status: 'disabled' } });
    assert.equal(disable.statusCode, 200);
    assert.equal((await onB(s2.accessToken)).statusCode, 401);
  });
});

describe('AuthCache unit rules', () => {
  const entry = (userId: string): CachedAuth<string> => ({ value: userId, userId, accountIds: ['acc'], institutionIds: ['inst'] });

  test('a fill whose query started before an invalidation is not stored', async () => {
    const channel = new InProcessChannel<AuthInvalidation>();
    const cache = new AuthCache<string>({ maxEntries: 10, ttlMs: 60_000, channel });
    let release!: () => void;
    let loads = 0;
    const slowLoad = () => {
      loads++;
      return new Promise<CachedAuth<string>>((resolve) => (release = () => resolve(entry('u1'))));
    };
    const pending = cache.get('s1', 0, slowLoad);
    cache.invalidateUser('u1'); // the write commits while the read is in flight
    release();
    assert.equal((await pending)?.value, 'u1', 'the request itself gets what it read');
    assert.equal(cache.snapshotStats().discardedFills, 1);
    await cache.get('s1', 0, async () => (loads++, entry('u1')));
    assert.equal(loads, 2, 'the next request reads again');
    await cache.get('s1', 0, async () => (loads++, entry('u1')));
    assert.equal(loads, 2, 'and that read is cached');
  });

  test('bounded: the least recently used session goes first', async () => {
    const cache = new AuthCache<string>({ maxEntries: 2, ttlMs: 60_000, channel: new InProcessChannel() });
    let loads = 0;
    const load = (u: string) => async () => (loads++, entry(u));
    await cache.get('s1', 0, load('u1'));
    await cache.get('s2', 0, load('u2'));
    await cache.get('s1', 0, load('u1')); // s1 is now the most recent
    await cache.get('s3', 0, load('u3')); // evicts s2
    assert.equal(cache.snapshotStats().size, 2);
    assert.equal(cache.snapshotStats().evictions, 1);
    await cache.get('s1', 0, load('u1'));
    assert.equal(loads, 3, 's1 survived');
    await cache.get('s2', 0, load('u2'));
    assert.equal(loads, 4, 's2 was evicted');
  });

  test('past the TTL an entry is served while one background read replaces it; past twice the TTL it is read first; TTL 0 disables', async () => {
    const cache = new AuthCache<string>({ maxEntries: 10, ttlMs: 1000, channel: new InProcessChannel() });
    let loads = 0;
    let version = 'v1';
    let release: (() => void) | undefined;
    const load = () => {
      loads++;
      const value = version;
      return new Promise<CachedAuth<string>>((resolve) => (release = () => resolve({ ...entry('u1'), value })));
    };
    const first = cache.get('s1', 0, load);
    release!();
    assert.equal((await first)?.value, 'v1');
    assert.equal((await cache.get('s1', 999, load))?.value, 'v1');
    assert.equal(loads, 1, 'fresh: no read');

    version = 'v2';
    assert.equal((await cache.get('s1', 1000, load))?.value, 'v1', 'past the TTL: answered at once from the entry');
    assert.equal(loads, 2, 'and one background read started');
    assert.equal((await cache.get('s1', 1001, load))?.value, 'v1');
    assert.equal(loads, 2, 'only one');
    release!();
    await new Promise((r) => setImmediate(r));
    assert.equal((await cache.get('s1', 1002, load))?.value, 'v2', 'the background read replaced the entry');
    assert.equal(cache.snapshotStats().refreshes, 1);

    version = 'v3';
    const late = cache.get('s1', 1000 + 2000, load);
    assert.equal(loads, 3, 'past twice the TTL: read before answering');
    release!();
    assert.equal((await late)?.value, 'v3');

    let plain = 0;
    const off = new AuthCache<string>({ maxEntries: 10, ttlMs: 0, channel: new InProcessChannel() });
    await off.get('s1', 0, async () => (plain++, entry('u1')));
    await off.get('s1', 0, async () => (plain++, entry('u1')));
    assert.equal(plain, 2);
  });

  test('an invalidation during a background read wins over its result', async () => {
    const cache = new AuthCache<string>({ maxEntries: 10, ttlMs: 1000, channel: new InProcessChannel() });
    let release: (() => void) | undefined;
    let loads = 0;
    const load = () => (loads++, new Promise<CachedAuth<string>>((resolve) => (release = () => resolve(entry('u1')))));
    const first = cache.get('s1', 0, load);
    release!();
    await first;
    await cache.get('s1', 1500, load); // starts the background read
    cache.invalidateUser('u1');
    release!();
    await new Promise((r) => setImmediate(r));
    assert.equal(cache.snapshotStats().size, 0, 'not put back');
    const next = cache.get('s1', 1600, load);
    assert.equal(loads, 3, 'the next request reads');
    release!();
    await next;
  });

  test('an unknown event drops everything', async () => {
    const channel = new InProcessChannel<AuthInvalidation>();
    const cache = new AuthCache<string>({ maxEntries: 10, ttlMs: 60_000, channel });
    await cache.get('s1', 0, async () => entry('u1'));
    channel.publish({ kind: 'something-new' } as unknown as AuthInvalidation);
    assert.equal(cache.snapshotStats().size, 0);
  });
});

describe('verified access tokens are remembered, never beyond their expiry', () => {
  test('a remembered token is refused once expired; a tampered one is checked, not remembered', async () => {
    const tokens = new TokenService('a-secret-of-at-least-thirty-two-characters!', 60, 3600);
    const t0 = new Date('2026-11-02T10:00:00Z');
    const token = await tokens.signAccess({ userId: 'u1', sessionId: 's1', institutionId: null }, t0);
    assert.deepEqual(await tokens.verifyAccess(token, t0), { userId: 'u1', sessionId: 's1', institutionId: null });
    assert.deepEqual(await tokens.verifyAccess(token, new Date(t0.getTime() + 59_000)), { userId: 'u1', sessionId: 's1', institutionId: null });
    await assert.rejects(tokens.verifyAccess(token, new Date(t0.getTime() + 60_000)), /expired/);
    const [h, p, sig] = token.split('.');
    const forged = `${h}.${Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p!, 'base64url').toString()), sub: 'u2' })).toString('base64url')}.${sig}`;
    await assert.rejects(tokens.verifyAccess(forged, t0), /Invalid access token/);
  });
});
