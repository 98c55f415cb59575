import { after, before, describe, test } from 'node:test';
import { eq, inArray } from 'drizzle-orm';
import assert from 'node:assert/strict';
import { sessions } from '../src/db/schema.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

describe('POST /api/admin/sessions', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const tok = {} as Record<'root' | 'adminA' | 'adminB' | 'instAdminA1' | 'userA1' | 'userA2' | 'userB1' | 'odd' | 'under', string>;
  let oddA1: Awaited<ReturnType<typeof makeUser>>;
  let underA2: Awaited<ReturnType<typeof makeUser>>;
  let oldSessionId = '';

  const list = (token: string | undefined, payload?: unknown, header: 'bearer' | 'x-access-token' = 'x-access-token') =>
    t.app.inject({
      method: 'POST',
      url: '/api/admin/sessions',
      headers: token ? (header === 'bearer' ? bearer(token) : { 'x-access-token': token }) : {},
      ...(payload !== undefined ? { payload: payload as object } : {}),
    });
  const ids = async (token: string, payload: Record<string, unknown> = {}) => {
    const res = await list(token, { pageSize: 5000, ...payload });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data as any[];
  };
  /** A session active now (created and last active now, expiring in a day); returns its id. */
  const insertLiveSession = async (fields: { userId: string; accountId: string; institutionId: string; ip: string; ua: string }) => {
    const id = newId();
    const now = Date.now();
    await t.database.db.insert(sessions).values({ id, refreshHash: `live-${id}`, createdAt: new Date(now), lastActivityAt: new Date(now), expiresAt: new Date(now + 86_400_000), ...fields });
    return id;
  };
  const expectInvalid = (res: { statusCode: number; json(): any }, field: string) => {
    assert.equal(res.statusCode, 400, JSON.stringify(res.json()));
    assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    assert.ok(res.json().error.details.some((d: any) => d.field === field), JSON.stringify(res.json().error.details));
  };

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    oddA1 = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' }, fields: { fname: 'Per%cent', lname: 'Dot.Star' } });
    underA2 = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a2.id]: 'user' }, fields: { fname: 'Under_score', lname: 'Plain' } });
    for (const [name, user] of Object.entries({ root: w.superadmin, adminA: w.accountAdminA, adminB: w.accountAdminB, instAdminA1: w.adminA1, userA1: w.userA1, userA2: w.userA2, userB1: w.userB1, odd: oddA1, under: underA2 })) {
      tok[name as keyof typeof tok] = (await login(t.app, user.email)).accessToken;
    }
    // a session of userA1 that ended 45 days ago (outside the default range of 30 days)
    oldSessionId = newId();
    const day = 86_400_000;
    await t.database.db.insert(sessions).values({
      id: oldSessionId,
      userId: w.userA1.id,
      accountId: w.accountA.id,
      institutionId: w.a1.id,
      refreshHash: 'x',
      ip: '10.0.0.9',
      ua: 'old browser',
      createdAt: new Date(Date.now() - 60 * day),
      lastActivityAt: new Date(Date.now() - 45 * day),
      expiresAt: new Date(Date.now() - 30 * day),
    });
  });
  after(() => t.close());

  test('envelope, item shape and the default range of 30 days', async () => {
    const res = await list(tok.root, {});
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.deepEqual(Object.keys(body).sort(), ['data', 'hasMore', 'message', 'page', 'pageSize', 'success', 'total']);
    assert.equal(body.page, 1);
    assert.equal(body.pageSize, 100);
    const mine = body.data.find((s: any) => s.user._id === w.userA1.id);
    assert.deepEqual(Object.keys(mine).sort(), ['_id', 'account', 'created', 'expiresAt', 'institution', 'ip', 'lastActivityAt', 'revoked', 'ua', 'user']);
    assert.deepEqual(mine.user, { _id: w.userA1.id, email: w.userA1.email, fname: 'Test', lname: 'User' });
    assert.equal(mine.account, w.accountA.id);
    assert.equal(mine.institution, w.a1.id);
    assert.equal(mine.revoked, false);
    assert.ok(!body.data.some((s: any) => s._id === oldSessionId), 'the old session is outside the default range');
    // no body at all: the defaults; both token headers work
    const noBody = await list(tok.root, undefined, 'bearer');
    assert.equal(noBody.statusCode, 200);
    assert.equal(noBody.json().total, body.total);

    const ranged = await ids(tok.root, { daterange: [new Date(Date.now() - 50 * 86_400_000).toISOString(), new Date(Date.now() - 40 * 86_400_000).toISOString()] });
    assert.deepEqual(ranged.map((s) => s._id), [oldSessionId]);
  });

  test('scope per admin role: superadmin all, account admin its account, institution admin its institution, plain users 403', async () => {
    const all = await ids(tok.root);
    assert.ok(all.some((s) => s.account === w.accountB.id) && all.some((s) => s.account === w.accountA.id));
    const a = await ids(tok.adminA);
    assert.ok(a.length > 0 && a.every((s) => s.account === w.accountA.id));
    assert.ok(a.some((s) => s.user._id === w.userA2.id));
    const b = await ids(tok.adminB);
    assert.ok(b.length > 0 && b.every((s) => s.account === w.accountB.id));
    const inst = await ids(tok.instAdminA1);
    assert.ok(inst.length > 0 && inst.every((s) => s.institution === w.a1.id));
    assert.ok(!inst.some((s) => s.user._id === w.userA2.id));
    // account admin B filtering on account A gets nothing, not an error
    assert.deepEqual(await ids(tok.adminB, { account: w.accountA.id }), []);

    for (const token of [tok.userA1, tok.userB1]) {
      const res = await list(token, {});
      assert.equal(res.statusCode, 403);
      assert.equal(res.json().error.code, 'FORBIDDEN');
    }
    assert.equal((await list(undefined, {})).statusCode, 401);
    assert.equal((await list('garbage', {})).statusCode, 401);
  });

  test("a session opened in an account's institution by a user of another account: that account's admin and the institution's admin list it, and the account filter finds it", async () => {
    const guest = await makeUser(t.database, { accountId: w.accountB.id, memberships: { [w.a1.id]: 'user' } });
    // an account admin of A enrolled nowhere: its rights come from the account alone
    const adminAOnly = (await login(t.app, (await makeUser(t.database, { accountId: w.accountA.id, role: 'accountadmin' })).email)).accessToken;
    const id = await insertLiveSession({ userId: guest.id, accountId: w.accountB.id, institutionId: w.a1.id, ip: '10.0.0.7', ua: 'guest browser' });
    try {
      for (const token of [adminAOnly, tok.adminA, tok.instAdminA1, tok.adminB, tok.root]) assert.ok((await ids(token)).some((s) => s._id === id));
      assert.ok((await ids(tok.root, { account: w.accountA.id })).some((s) => s._id === id), 'opened in an institution of account A');
      assert.ok((await ids(tok.root, { account: w.accountB.id })).some((s) => s._id === id), 'a user of account B');
      assert.ok(!(await ids(adminAOnly, { institution: w.a2.id })).some((s) => s._id === id));
    } finally {
      await t.database.db.delete(sessions).where(eq(sessions.id, id));
    }
  });

  test("a session shows an admin of another tenant neither the user's home account nor an institution it cannot see; the user's own account admin and a superadmin see the account", async () => {
    // a user of account A enrolled in B1 too (as a superadmin may do), with a session opened in B1; B1 also has an institution admin of its own (home B)
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.b1.id]: 'user' } });
    const instAdminB1 = (await login(t.app, (await makeUser(t.database, { accountId: w.accountB.id, memberships: { [w.b1.id]: 'admin' } })).email)).accessToken;
    const id = await insertLiveSession({ userId: member.id, accountId: w.accountA.id, institutionId: w.b1.id, ip: '10.0.0.8', ua: 'visiting browser' });
    const seen = async (token: string) => {
      const res = await list(token, { pageSize: 5000 });
      assert.equal(res.statusCode, 200, res.body);
      const found = res.json().data.find((s: any) => s._id === id);
      assert.ok(found, 'the session is listed');
      return { account: found.account, institution: found.institution, body: res.body };
    };
    try {
      // B's admins list it (opened in B1): the institution is theirs, the account is not
      for (const token of [tok.adminB, instAdminB1]) {
        const { account, institution, body } = await seen(token);
        assert.equal(account, null);
        assert.equal(institution, w.b1.id);
        assert.ok(!body.includes(w.accountA.id), 'B lists the id of account A');
      }
      // A's account admin lists it (a user of A): the account is its own, B1 is invisible to it
      const byA = await seen(tok.adminA);
      assert.equal(byA.account, w.accountA.id);
      assert.equal(byA.institution, null);
      assert.ok(!byA.body.includes(w.b1.id), 'A lists the id of B1');
      // a superadmin sees both
      const byRoot = await seen(tok.root);
      assert.equal(byRoot.account, w.accountA.id);
      assert.equal(byRoot.institution, w.b1.id);
    } finally {
      await t.database.db.delete(sessions).where(eq(sessions.id, id));
    }
  });

  test("the account filter matches nothing for an account id the caller cannot see: B's admin cannot tell which sessions it lists are of account A", async () => {
    // a user of A enrolled in B1 with a session opened there, and a user of B enrolled in A1 with a session opened there: B's account admin lists both
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.b1.id]: 'user' } });
    const visitor = await makeUser(t.database, { accountId: w.accountB.id, memberships: { [w.b1.id]: 'user', [w.a1.id]: 'user' } });
    const inB1 = await insertLiveSession({ userId: member.id, accountId: w.accountA.id, institutionId: w.b1.id, ip: '10.0.0.10', ua: 'member browser' });
    const inA1 = await insertLiveSession({ userId: visitor.id, accountId: w.accountB.id, institutionId: w.a1.id, ip: '10.0.0.11', ua: 'visitor browser' });
    const listed = async (token: string, payload: Record<string, unknown>) => {
      const res = await list(token, { pageSize: 5000, ...payload });
      assert.equal(res.statusCode, 200, res.body);
      return { total: res.json().total as number, ids: (res.json().data as any[]).map((s) => s._id as string) };
    };
    try {
      for (const [user, id] of [[member, inB1], [visitor, inA1]] as const) {
        assert.deepEqual(await listed(tok.adminB, { usersearch: user.email }), { total: 1, ids: [id] }, 'B lists it without the filter');
        // B filtering by A's id: nothing, neither "this user is of A" nor "this session was opened in an institution of A"
        assert.deepEqual(await listed(tok.adminB, { usersearch: user.email, account: w.accountA.id }), { total: 0, ids: [] });
        // those who see account A find it by it: a superadmin, and A's account admin (a user of A; opened in A1)
        for (const token of [tok.root, tok.adminA]) assert.deepEqual(await listed(token, { usersearch: user.email, account: w.accountA.id }), { total: 1, ids: [id] });
      }
      assert.deepEqual(await listed(tok.adminB, { account: w.accountA.id }), { total: 0, ids: [] });
      // a mix of A and B: B's sessions only, exactly as with B alone
      const onlyB = await listed(tok.adminB, { account: w.accountB.id });
      assert.ok(onlyB.ids.includes(inB1) && onlyB.ids.includes(inA1), 'opened in B1; a user of B');
      assert.deepEqual(await listed(tok.adminB, { account: `${w.accountA.id} ${w.accountB.id}` }), onlyB);
    } finally {
      await t.database.db.delete(sessions).where(inArray(sessions.id, [inB1, inA1]));
    }
  });

  test("the institution filter matches nothing for an institution the caller cannot see: an admin cannot tell which sessions it lists were opened in another tenant's institution", async () => {
    // a user of B enrolled in A1 with a session opened there, listed to B's account admin (a user of B) with institution null;
    // a user of A enrolled in B1 with a session opened there, listed to A's account admin (a user of A) with institution null
    const visitor = await makeUser(t.database, { accountId: w.accountB.id, memberships: { [w.b1.id]: 'user', [w.a1.id]: 'user' } });
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.b1.id]: 'user' } });
    const inA1 = await insertLiveSession({ userId: visitor.id, accountId: w.accountB.id, institutionId: w.a1.id, ip: '10.0.0.12', ua: 'visitor browser' });
    const inB1 = await insertLiveSession({ userId: member.id, accountId: w.accountA.id, institutionId: w.b1.id, ip: '10.0.0.13', ua: 'member browser' });
    // a session of a user of B opened in an institution that no longer exists (sessions keep the id): listed to B with institution null
    const gone = newId();
    const inGone = await insertLiveSession({ userId: visitor.id, accountId: w.accountB.id, institutionId: gone, ip: '10.0.0.14', ua: 'visitor browser' });
    const listed = async (token: string, payload: Record<string, unknown>) => {
      const res = await list(token, { pageSize: 5000, ...payload });
      assert.equal(res.statusCode, 200, res.body);
      return { total: res.json().total as number, ids: (res.json().data as any[]).map((s) => s._id as string), institutions: (res.json().data as any[]).map((s) => s.institution as string | null) };
    };
    try {
      const byB = await listed(tok.adminB, { usersearch: visitor.email });
      assert.equal(byB.total, 2, 'B lists both without the filter');
      assert.deepEqual([...byB.ids].sort(), [inA1, inGone].sort());
      assert.deepEqual(byB.institutions, [null, null]);
      assert.deepEqual(await listed(tok.adminA, { usersearch: member.email }), { total: 1, ids: [inB1], institutions: [null] }, 'A lists it without the filter');
      // filtering by the institution it cannot see: nothing, as for an id of no institution at all
      const none = { total: 0, ids: [], institutions: [] };
      assert.deepEqual(await listed(tok.adminB, { usersearch: visitor.email, institution: w.a1.id }), none);
      assert.deepEqual(await listed(tok.adminB, { institution: w.a1.id }), none);
      assert.deepEqual(await listed(tok.adminB, { usersearch: visitor.email, institution: gone }), none);
      assert.deepEqual(await listed(tok.adminA, { usersearch: member.email, institution: w.b1.id }), none);
      assert.deepEqual(await listed(tok.adminA, { institution: w.b1.id }), none);
      // those who see the institution find the session by it: a superadmin and A's admins for A1, a superadmin and B's admin for B1
      for (const token of [tok.root, tok.adminA, tok.instAdminA1]) {
        assert.deepEqual(await listed(token, { usersearch: visitor.email, institution: w.a1.id }), { total: 1, ids: [inA1], institutions: [w.a1.id] });
      }
      for (const token of [tok.root, tok.adminB]) {
        assert.deepEqual(await listed(token, { usersearch: member.email, institution: w.b1.id }), { total: 1, ids: [inB1], institutions: [w.b1.id] });
      }
      // a superadmin, who reads the id of an institution that no longer exists, finds the session by it
      assert.deepEqual(await listed(tok.root, { usersearch: visitor.email, institution: gone }), { total: 1, ids: [inGone], institutions: [gone] });
    } finally {
      await t.database.db.delete(sessions).where(inArray(sessions.id, [inA1, inB1, inGone]));
    }
  });

  test("a superadmin's sessions are listed to superadmins only, though its home account and the institution it switched to are the admins'", async () => {
    // the superadmin's home account is account A; this session of it was opened in institution A1
    const id = await insertLiveSession({ userId: w.superadmin.id, accountId: w.accountA.id, institutionId: w.a1.id, ip: '10.0.0.1', ua: 'operator browser' });
    try {
      const root = await ids(tok.root);
      assert.ok(root.some((s) => s._id === id));
      assert.ok(root.some((s) => s.user._id === w.superadmin.id && s._id !== id), "the superadmin's own login session");
      for (const token of [tok.adminA, tok.instAdminA1]) {
        const listed = await ids(token);
        assert.ok(listed.length > 0, 'the admin still lists the sessions of its users');
        assert.ok(!listed.some((s) => s.user._id === w.superadmin.id), JSON.stringify(listed.filter((s) => s.user._id === w.superadmin.id)));
        // nor by filtering for it
        assert.deepEqual(await ids(token, { usersearch: w.superadmin.email }), []);
        const res = await list(token, { usersearch: w.superadmin.email });
        assert.equal(res.json().total, 0);
      }
    } finally {
      await t.database.db.delete(sessions).where(eq(sessions.id, id));
    }
  });

  test('filters: space-separated accounts, institution, literal usersearch, revoked sessions', async () => {
    const both = await ids(tok.root, { account: `  ${w.accountA.id}   ${w.accountB.id} ` });
    assert.ok(both.some((s) => s.account === w.accountB.id) && both.some((s) => s.account === w.accountA.id));
    assert.ok((await ids(tok.root, { account: w.accountB.id })).every((s) => s.account === w.accountB.id));
    expectInvalid(await list(tok.root, { account: 'not-an-id' }), 'account');
    const a2 = await ids(tok.root, { institution: w.a2.id });
    assert.deepEqual([...new Set(a2.map((s) => s.user._id))].sort(), [w.userA2.id, underA2.id].sort());

    assert.deepEqual((await ids(tok.root, { usersearch: '%' })).map((s) => s.user._id), [oddA1.id]);
    assert.deepEqual((await ids(tok.root, { usersearch: 'r_s' })).map((s) => s.user._id), [underA2.id]);
    assert.deepEqual((await ids(tok.root, { usersearch: 'DOT.STAR' })).map((s) => s.user._id), [oddA1.id]);
    assert.deepEqual(await ids(tok.root, { usersearch: '.*' }), []);
    assert.deepEqual(await ids(tok.root, { usersearch: '(' }), []);
    assert.deepEqual((await ids(tok.root, { usersearch: w.userB1.email.toUpperCase() })).map((s) => s.user._id), [w.userB1.id]);

    const session = await login(t.app, w.userA2.email);
    await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(session.accessToken) });
    const revoked = (await ids(tok.root, { usersearch: w.userA2.email })).filter((s) => s.revoked);
    assert.equal(revoked.length, 1);
  });

  test('usersearch finds a user whose name and e-mail were sent decomposed (NFD) by their exact text, a substring and the composed spelling', async () => {
    const email = `jose-${newId().slice(-6)}@acme.test`;
    const created = await t.app.inject({
      method: 'POST',
      url: '/api/admin/user',
      headers: bearer(tok.root),
      payload: { email, password: 'a-long-password', fname: 'Jose\u0301', lname: 'Bre\u0301zillon', account: w.accountA.id, institutions: [{ institution: w.a1.id, role: 'user' }] },
    });
    assert.equal(created.statusCode, 201, created.body);
    const viaRoute = created.json().data._id as string;
    const viaRepo = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' }, fields: { fname: 'Ine\u0300s', lname: 'Bre\u0301zillon' } });
    await login(t.app, email, 'a-long-password');
    await login(t.app, viaRepo.email);
    const users = async (usersearch: string) => [...new Set((await ids(tok.root, { usersearch })).map((s) => s.user._id as string))].sort();
    for (const term of ['Bre\u0301zillon', 'Bre\u0301z', 'BR\u00c9ZILLON', 'e\u0301zil']) assert.deepEqual(await users(term), [viaRoute, viaRepo.id].sort(), JSON.stringify(term));
    for (const term of ['Jos\u00e9', 'jose\u0301']) assert.deepEqual(await users(term), [viaRoute], JSON.stringify(term));
    // an e-mail given decomposed (create-admin, the bootstrap and the repository take any; the admin route ASCII ones)
    const nfdMail = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' }, email: `zoe\u0301-${newId().slice(-6)}@acme.test` });
    await login(t.app, nfdMail.email.normalize('NFD'));
    for (const term of [nfdMail.email.normalize('NFD'), nfdMail.email.normalize('NFC').toUpperCase(), 'oe\u0301-']) assert.deepEqual(await users(term), [nfdMail.id], JSON.stringify(term));
    assert.deepEqual(await users('Ine\u0300s Bre'), [], 'first and last names are matched one at a time');
    assert.deepEqual(await users('IN\u00c8S'), [viaRepo.id]);
  });

  test('pagination: stable order, last page, hasMore, limitsearch alias, bounds', async () => {
    const everything = await ids(tok.root);
    assert.ok(everything.length >= 5);
    const sorted = [...everything].sort((x, y) => (x.created === y.created ? (x._id < y._id ? 1 : -1) : x.created < y.created ? 1 : -1));
    assert.deepEqual(everything.map((s) => s._id), sorted.map((s) => s._id), 'newest first, then id');

    const pageSize = 2;
    const pages: any[] = [];
    let page = 1;
    for (;;) {
      const res = (await list(tok.root, { page, pageSize })).json();
      assert.equal(res.total, everything.length);
      pages.push(...res.data);
      const last = page * pageSize >= everything.length;
      assert.equal(res.hasMore, !last, `page ${page}`);
      if (last) {
        assert.equal(res.data.length, everything.length - (page - 1) * pageSize);
        break;
      }
      page += 1;
    }
    assert.deepEqual(pages.map((s) => s._id), everything.map((s) => s._id));
    const beyond = (await list(tok.root, { page: page + 1, pageSize })).json();
    assert.deepEqual([beyond.data.length, beyond.hasMore], [0, false]);

    const alias = (await list(tok.root, { limitsearch: 3 })).json();
    assert.deepEqual([alias.pageSize, alias.data.length], [3, 3]);
    assert.equal((await list(tok.root, { limitsearch: 3, pageSize: 1 })).json().pageSize, 1, 'pageSize wins over limitsearch');

    expectInvalid(await list(tok.root, { pageSize: 5001 }), 'pageSize');
    expectInvalid(await list(tok.root, { pageSize: 0 }), 'pageSize');
    expectInvalid(await list(tok.root, { page: 0 }), 'page');
    expectInvalid(await list(tok.root, { limitsearch: 5001 }), 'limitsearch');
    expectInvalid(await list(tok.root, { daterange: ['2026-01-01T00:00:00Z'] }), 'daterange');
    expectInvalid(await list(tok.root, { daterange: ['yesterday', 'today'] }), 'daterange.0');
    expectInvalid(await list(tok.root, { daterange: ['2026-02-01T00:00:00Z', '2026-01-01T00:00:00Z'] }), 'daterange');
    expectInvalid(await list(tok.root, { usersearch: 7 }), 'usersearch');
    assert.equal((await list(tok.root, { pageSize: 5000 })).statusCode, 200);
  });

  test('daterange entries the date-time format accepts but no timestamp can hold: 400 naming the entry, never a 500', async () => {
    const valid = '2026-01-01T00:00:00Z';
    const cases: Array<[string, string]> = [
      ['2026-11-24T23:59:60Z', 'a leap second: an Invalid Date'],
      ['2026-11-24T10:00:00+01', 'an offset without minutes: an Invalid Date'],
      ['0000-01-01T00:00:00Z', 'year 0'],
      ['0001-01-01T00:30:00+01:00', 'year 0 once in UTC'],
      ['9999-12-31T23:59:59-14:00', 'year 10000 once in UTC'],
    ];
    for (const [text, why] of cases) {
      for (const [daterange, field] of [
        [[text, valid], 'daterange.0'],
        [[valid, text], 'daterange.1'],
      ] as const) {
        const res = await list(tok.root, { daterange });
        assert.equal(res.statusCode, 400, `${why} at ${field}: ${res.body}`);
        const body = res.json();
        assert.deepEqual(Object.keys(body).sort(), ['error', 'message', 'success'], res.body);
        assert.equal(body.success, false);
        assert.equal(typeof body.message, 'string');
        assert.equal(body.error.code, 'VALIDATION_FAILED');
        assert.deepEqual(body.error.details.map((d: any) => d.field), [field], res.body);
      }
    }
    // the edges of the years 1..9999 (UTC) are still accepted
    const edges = await list(tok.root, { daterange: ['0001-01-01T00:00:00Z', '9999-12-31T23:59:59.999Z'] });
    assert.equal(edges.statusCode, 200, edges.body);
    assert.ok(edges.json().data.some((s: any) => s._id === oldSessionId), 'the widest range holds every session');
    const offsets = await list(tok.root, { daterange: ['0001-01-01T01:00:00+01:00', '9999-12-31T23:59:59+00:00'] });
    assert.equal(offsets.statusCode, 200, offsets.body);
  });
});
