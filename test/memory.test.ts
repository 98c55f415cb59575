import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eq, sql } from 'drizzle-orm';
// Fastify's own response serializer factory (the one the app uses), to check the list route against it
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import { memoryParams } from '../src/db/schema.js';
import { newId } from '../src/shared/ids.js';
import { AnswerMemo, MemoryCache } from '../src/modules/memory/memory.cache.js';
import { USER_MEMORY_LIMIT, type MemoryWithInstitution } from '../src/modules/memory/memory.repository.js';
import { mergeNewestFirst, newestFirst } from '../src/modules/memory/memory.service.js';
import { MemoryListResponse } from '../src/modules/memory/memory.schemas.js';
import { LocalInvalidationBus } from '../src/platform/invalidation.js';
import { bearer, login, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { ManualClock, systemClock } from '../src/shared/clock.js';

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

describe('memory parameters', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let otherMemberA1: Awaited<ReturnType<typeof makeUser>>;
  const tok = {} as Record<'root' | 'adminA' | 'adminB' | 'instAdminA1' | 'userA1' | 'otherA1' | 'userA2', string>;

  const call = (method: Method, url: string, token?: string, payload?: unknown) =>
    t.app.inject({ method, url, headers: token ? bearer(token) : {}, ...(payload !== undefined ? { payload: payload as object } : {}) });

  const expectError = (res: { statusCode: number; json(): any }, status: number, code: string) => {
    assert.equal(res.statusCode, status, res.statusCode !== status ? JSON.stringify(res.json()) : '');
    const body = res.json();
    assert.equal(body.success, false);
    assert.equal(body.error.code, code);
    return body;
  };

  const create = async (token: string, payload: Record<string, unknown>) => {
    const res = await call('POST', '/api/user/memory', token, payload);
    assert.equal(res.statusCode, 201, res.body);
    return res.json().data;
  };

  const rowExists = async (id: string) => (await t.database.db.select().from(memoryParams).where(eq(memoryParams.id, id))).length === 1;

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    otherMemberA1 = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    for (const [name, user] of Object.entries({
      root: w.superadmin,
      adminA: w.accountAdminA,
      adminB: w.accountAdminB,
      instAdminA1: w.adminA1,
      userA1: w.userA1,
      otherA1: otherMemberA1,
      userA2: w.userA2,
    })) {
      tok[name as keyof typeof tok] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(() => t.close());

  test('create validates: key_name and key_value required, blank names refused, sharing needs membership', async () => {
    const missing = expectError(await call('POST', '/api/user/memory', tok.userA1, { key_name: 'tone' }), 400, 'VALIDATION_FAILED');
    assert.ok(missing.error.details.some((d: any) => d.field === 'key_value'));
    expectError(await call('POST', '/api/user/memory', tok.userA1, { key_name: '   ', key_value: 'x' }), 400, 'VALIDATION_FAILED');
    expectError(await call('POST', '/api/user/memory', tok.userA1, { key_name: 'a', key_value: 'x', shared: 'yes' }), 400, 'VALIDATION_FAILED');
    expectError(await call('POST', '/api/user/memory', tok.userA1, { key_name: 'a', key_value: 'x', shared: true, institution: w.a2.id }), 403, 'FORBIDDEN');
    expectError(await call('POST', '/api/user/memory', tok.userA1, { key_name: 'a', key_value: 'x', institution: w.a1.id }), 400, 'VALIDATION_FAILED');
    expectError(await call('POST', '/api/user/memory', undefined, { key_name: 'a', key_value: 'x' }), 401, 'UNAUTHENTICATED');
    expectError(await call('GET', '/api/user/memory'), 401, 'UNAUTHENTICATED');
  });

  test('list: personal rows for their author only, shared rows for every member; editable and isAuthor per caller', async () => {
    const personal = await create(tok.userA1, { key_name: ' tone ', key_value: 'friendly' });
    assert.equal(personal.key_name, 'tone');
    assert.equal(personal.key_namespace, 'default');
    assert.equal(personal.shared, false);
    assert.equal(personal.key_description, '');
    assert.deepEqual(personal.institution, { _id: '', name: '', ainame: '', picture: '', personal: true });
    const shared = await create(tok.userA1, { key_name: 'course', key_value: 'Physics 101', key_description: 'the course', key_namespace: 'class', shared: true });
    assert.deepEqual(shared.institution, { _id: w.a1.id, name: 'Acme Physics', ainame: 'Newton', picture: '' });
    const byAdmin = await create(tok.instAdminA1, { key_name: 'policy', key_value: 'be kind', shared: true });

    const mine = (await call('GET', '/api/user/memory', tok.userA1)).json();
    assert.equal(mine.success, true);
    const view = (list: any[], id: string) => list.find((r) => r._id === id);
    assert.deepEqual(
      [view(mine.data, personal._id), view(mine.data, shared._id), view(mine.data, byAdmin._id)].map((r) => r && { editable: r.editable, isAuthor: r.isAuthor }),
      [
        { editable: true, isAuthor: true },
        { editable: true, isAuthor: true },
        { editable: false, isAuthor: false },
      ],
    );
    // newest first
    assert.deepEqual(mine.data.map((r: any) => r._id), [byAdmin._id, shared._id, personal._id]);

    const other = (await call('GET', '/api/user/memory', tok.otherA1)).json().data;
    assert.equal(view(other, personal._id), undefined, 'a personal row is not shown to another member');
    assert.deepEqual({ editable: view(other, shared._id).editable, isAuthor: view(other, shared._id).isAuthor }, { editable: false, isAuthor: false });

    const admin = (await call('GET', '/api/user/memory', tok.instAdminA1)).json().data;
    assert.equal(view(admin, personal._id), undefined);
    assert.deepEqual({ editable: view(admin, shared._id).editable, isAuthor: view(admin, shared._id).isAuthor }, { editable: true, isAuthor: false });
    assert.deepEqual({ editable: view(admin, byAdmin._id).editable, isAuthor: view(admin, byAdmin._id).isAuthor }, { editable: true, isAuthor: true });

    // a member of another institution sees none of them
    assert.deepEqual((await call('GET', '/api/user/memory', tok.userA2)).json().data, []);

    // changes: another member 403, a personal row is invisible (404) even to admins, the admin may edit the shared row
    expectError(await call('PUT', `/api/user/memory/${shared._id}`, tok.otherA1, { key_value: 'hijacked' }), 403, 'FORBIDDEN');
    expectError(await call('DELETE', `/api/user/memory/${shared._id}`, tok.otherA1), 403, 'FORBIDDEN');
    expectError(await call('PUT', `/api/user/memory/${personal._id}`, tok.instAdminA1, { key_value: 'x' }), 404, 'NOT_FOUND');
    expectError(await call('PUT', `/api/user/memory/${shared._id}`, tok.userA2, { key_value: 'x' }), 404, 'NOT_FOUND');
    expectError(await call('PUT', `/api/user/memory/${shared._id}`, tok.instAdminA1, { shared: false }), 403, 'FORBIDDEN');
    const edited = await call('PUT', `/api/user/memory/${shared._id}`, tok.instAdminA1, { key_value: 'Physics 102' });
    assert.equal(edited.statusCode, 200);
    assert.equal(edited.json().data.key_value, 'Physics 102');
    assert.equal(edited.json().data.isAuthor, false);
    expectError(await call('PUT', `/api/user/memory/${newId()}`, tok.userA1, { key_value: 'x' }), 404, 'NOT_FOUND');
    expectError(await call('PUT', '/api/user/memory/not-an-id', tok.userA1, { key_value: 'x' }), 400, 'VALIDATION_FAILED');

    // the author un-shares: it becomes personal again
    const unshared = (await call('PUT', `/api/user/memory/${shared._id}`, tok.userA1, { shared: false })).json().data;
    assert.equal(unshared.shared, false);
    assert.equal(unshared.institution.personal, true);
    assert.equal(view((await call('GET', '/api/user/memory', tok.otherA1)).json().data, shared._id), undefined);

    const deleted = await call('DELETE', `/api/user/memory/${personal._id}`, tok.userA1);
    assert.equal(deleted.statusCode, 200);
    assert.equal(await rowExists(personal._id), false);
  });

  test('list is sent pre-serialized: byte for byte what the response schema serializer writes, for every point of view', async () => {
    // a fresh institution, so that each list holds exactly the rows made here; strings that need escaping
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Quote "Q" \\ Inst', ainame: 'Zoë', picture: 'https://cdn.example/p.png' });
    const author = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const instAdmin = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'admin' } });
    const [at, mt, it] = await Promise.all([author, member, instAdmin].map(async (u) => (await login(t.app, u.email)).accessToken));

    // in creation order; the list is newest first
    const p1 = await create(at!, { key_name: 'p1', key_value: 'plain' });
    const s1 = await create(at!, { key_name: 's1', key_value: 'line\nbreak "quoted" \\ tab\t', key_description: 'd', shared: true });
    const p2 = await create(at!, { key_name: 'p2', key_value: 'é \u2028 😀 </script> \u0001', key_namespace: 'ns' });
    const s2 = await create(at!, { key_name: 's2', key_value: 'x'.repeat(500), shared: true });
    const s3 = await create(it!, { key_name: 's3', key_value: 'by the admin', shared: true });

    // the object form (each row as the create route presented it) with the viewer's editable/isAuthor
    const as = (row: any, editable: boolean, isAuthor: boolean) => ({ ...row, editable, isAuthor });
    const serialize = SerializerSelector()({}, {})({ schema: MemoryListResponse, method: 'GET', url: '/api/user/memory', httpStatus: '200' });
    const views = {
      author: { token: at!, data: [as(s3, false, false), as(s2, true, true), as(p2, true, true), as(s1, true, true), as(p1, true, true)] },
      member: { token: mt!, data: [as(s3, false, false), as(s2, false, false), as(s1, false, false)] },
      admin: { token: it!, data: [as(s3, true, true), as(s2, true, false), as(s1, true, false)] },
    };
    for (const [who, view] of Object.entries(views)) {
      const expected = serialize({ success: true, data: view.data });
      // twice: the second answer comes from the memoized row JSON
      for (let i = 0; i < 2; i++) {
        const res = await call('GET', '/api/user/memory', view.token);
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.headers['content-type'], 'application/json; charset=utf-8');
        assert.equal(res.body, expected, `${who}, request ${i + 1}`);
        assert.deepEqual(JSON.parse(res.body), JSON.parse(expected));
      }
    }
    const authorRows = JSON.parse(serialize({ success: true, data: views.author.data })).data;
    assert.deepEqual(authorRows.find((r: any) => r._id === p1._id).institution, { _id: '', name: '', ainame: '', picture: '', personal: true });
    assert.deepEqual(authorRows.find((r: any) => r._id === s1._id).institution, { _id: inst.id, name: 'Quote "Q" \\ Inst', ainame: 'Zoë', picture: 'https://cdn.example/p.png' });

    // an update changes the row's JSON for every viewer (a new row object in the cache)
    await call('PUT', `/api/user/memory/${s1._id}`, at!, { key_value: 'changed' });
    const seen = JSON.parse((await call('GET', '/api/user/memory', mt!)).body).data;
    assert.equal(seen.find((r: any) => r._id === s1._id).key_value, 'changed');
  });

  test('admin listing of a user: grouped by institution, personal rows only for account-level admins, other tenants 404', async () => {
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    const ut = (await login(t.app, u.email)).accessToken;
    const p = await create(ut, { key_name: 'p', key_value: '1' });
    const s1 = await create(ut, { key_name: 's1', key_value: '1', shared: true, institution: w.a1.id });
    const s2 = await create(ut, { key_name: 's2', key_value: '1', shared: true, institution: w.a2.id });

    const byAccountAdmin = (await call('GET', `/api/admin/memory/user/${u.id}`, tok.adminA)).json();
    assert.equal(byAccountAdmin.success, true);
    assert.deepEqual(
      byAccountAdmin.data.map((g: any) => [g.institution.personal === true ? 'personal' : g.institution.name, g.items.map((i: any) => i._id)]),
      [
        ['personal', [p._id]],
        ['Acme History', [s2._id]],
        ['Acme Physics', [s1._id]],
      ],
    );
    const byInstAdmin = (await call('GET', `/api/admin/memory/user/${u.id}`, tok.instAdminA1)).json();
    assert.deepEqual(byInstAdmin.data.map((g: any) => g.institution._id), [w.a1.id]);
    assert.equal(byInstAdmin.data[0].items[0].editable, true);

    expectError(await call('GET', `/api/admin/memory/user/${u.id}`, tok.adminB), 404, 'NOT_FOUND');
    expectError(await call('GET', `/api/admin/memory/user/${u.id}`, tok.otherA1), 403, 'FORBIDDEN');
    expectError(await call('GET', `/api/admin/memory/user/${newId()}`, tok.root), 404, 'NOT_FOUND');

    // a superadmin's memory is for superadmins, even when their home account is the caller's (makeWorld: account A)
    const rootRow = await create(tok.root, { key_name: 'break-glass', key_value: 'PIN 7731' });
    for (const token of [tok.adminA, tok.instAdminA1]) {
      const read = expectError(await call('GET', `/api/admin/memory/user/${w.superadmin.id}`, token), 403, 'FORBIDDEN');
      assert.doesNotMatch(JSON.stringify(read), /7731/u);
      expectError(await call('DELETE', `/api/admin/memory/user/${w.superadmin.id}`, token, { namespace: 'default' }), 403, 'FORBIDDEN');
    }
    assert.ok(await rowExists(rootRow._id));
    assert.equal((await call('GET', `/api/admin/memory/user/${w.superadmin.id}`, tok.root)).statusCode, 200);

    const inst = (await call('GET', `/api/admin/memory/institution/${w.a2.id}?pageSize=1`, tok.adminA)).json();
    assert.equal(inst.total, 1);
    assert.equal(inst.hasMore, false);
    assert.equal(inst.institution._id, w.a2.id);
    assert.deepEqual(inst.data.map((r: any) => r._id), [s2._id]);
    expectError(await call('GET', `/api/admin/memory/institution/${w.a2.id}`, tok.instAdminA1), 403, 'FORBIDDEN');
    expectError(await call('GET', `/api/admin/memory/institution/${w.a2.id}`, tok.adminB), 404, 'NOT_FOUND');
  });

  test("a user of another account enrolled in one of the account's institutions: its account admin administers the rows shared there, not the user's personal ones", async () => {
    const guest = await makeUser(t.database, { accountId: w.accountB.id, memberships: { [w.a1.id]: 'user' } });
    const gt = (await login(t.app, guest.email)).accessToken;
    // an account admin of A enrolled nowhere: its rights come from the account alone
    const adminA = (await login(t.app, (await makeUser(t.database, { accountId: w.accountA.id, role: 'accountadmin' })).email)).accessToken;
    const personal = await create(gt, { key_name: 'mine', key_value: '1' });
    const inA1 = await create(gt, { key_name: 'shared in a1', key_value: '1', shared: true, institution: w.a1.id });
    const listed = await call('GET', `/api/admin/memory/user/${guest.id}`, adminA);
    assert.equal(listed.statusCode, 200, listed.body);
    // editable is what PUT /api/user/memory/{id} does: the account admin administers A1 (contract §2), so it edits the rows
    // shared there although it is enrolled nowhere (contract §7: "the author and that institution's admins may edit them")
    assert.deepEqual(listed.json().data.map((g: any) => [g.institution._id, g.items.map((i: any) => [i._id, i.editable])]), [[w.a1.id, [[inA1._id, true]]]]);
    const byInstitution = (await call('GET', `/api/admin/memory/institution/${w.a1.id}?pageSize=5000`, adminA)).json();
    assert.equal(byInstitution.data.find((r: any) => r._id === inA1._id)?.editable, true);
    const byAccountAdmin = await call('PUT', `/api/user/memory/${inA1._id}`, adminA, { key_value: 'by the account admin' });
    assert.equal(byAccountAdmin.statusCode, 200, byAccountAdmin.body);
    assert.deepEqual([byAccountAdmin.json().data.key_value, byAccountAdmin.json().data.isAuthor], ['by the account admin', false]);
    // so does a superadmin enrolled nowhere; only the author turns sharing off; the row stays out of their own user space
    assert.equal((await call('PUT', `/api/user/memory/${inA1._id}`, tok.root, { key_value: 'by the superadmin' })).statusCode, 200);
    expectError(await call('PUT', `/api/user/memory/${inA1._id}`, adminA, { shared: false }), 403, 'FORBIDDEN');
    assert.equal((await call('GET', '/api/user/memory', adminA)).json().data.length, 0);
    // another account's admin neither reads nor changes it
    expectError(await call('PUT', `/api/user/memory/${inA1._id}`, tok.adminB, { key_value: 'x' }), 404, 'NOT_FOUND');
    // A1's institution admin is a member: editable, and the PUT goes through
    const inAdmin = (await call('GET', `/api/admin/memory/institution/${w.a1.id}?pageSize=5000`, tok.instAdminA1)).json();
    assert.equal(inAdmin.data.find((r: any) => r._id === inA1._id)?.editable, true);
    assert.equal((await call('PUT', `/api/user/memory/${inA1._id}`, tok.instAdminA1, { key_value: '2' })).statusCode, 200);
    const deleted = await call('DELETE', `/api/admin/memory/user/${guest.id}`, adminA, { ids: [personal._id, inA1._id] });
    assert.equal(deleted.statusCode, 200, deleted.body);
    assert.deepEqual([deleted.json().deletedCount, deleted.json().skippedCount], [1, 1]);
    assert.equal(await rowExists(inA1._id), false);
    assert.equal(await rowExists(personal._id), true, "the guest's personal row belongs to account B's admins");
    // account B's admin administers the guest as a whole; a plain member of A1 sees the guest but administers nothing
    assert.equal((await call('GET', `/api/admin/memory/user/${guest.id}`, tok.adminB)).json().data[0].items[0]._id, personal._id);
    expectError(await call('GET', `/api/admin/memory/user/${guest.id}`, tok.otherA1), 403, 'FORBIDDEN');
  });

  test('bulk delete by ids: each row re-authorized, rows the admin may not touch skipped and counted', async () => {
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    const ut = (await login(t.app, u.email)).accessToken;
    const personal = await create(ut, { key_name: 'p', key_value: '1' });
    const inA1 = await create(ut, { key_name: 's1', key_value: '1', shared: true, institution: w.a1.id });
    const inA2 = await create(ut, { key_name: 's2', key_value: '1', shared: true, institution: w.a2.id });
    const someoneElses = await create(tok.userA1, { key_name: 'x', key_value: '1', shared: true });

    // the institution admin of A1 may delete only the A1 row; the personal row, the A2 row, another
    // user's row and an unknown id are skipped
    const res = await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.instAdminA1, { ids: [personal._id, inA1._id, inA2._id, someoneElses._id, newId()] });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(
      { success: res.json().success, deletedCount: res.json().deletedCount, skippedCount: res.json().skippedCount },
      { success: true, deletedCount: 1, skippedCount: 4 },
    );
    assert.equal(await rowExists(inA1._id), false);
    assert.equal(await rowExists(personal._id), true);
    assert.equal(await rowExists(inA2._id), true);
    assert.equal(await rowExists(someoneElses._id), true);

    // ids with a filter: only the listed rows that match it (spec: with ids only those rows are deleted;
    // the filter never widens the selection). The personal row is not in namespace 'x': skipped, kept.
    const narrowed = await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminA, { ids: [personal._id], namespace: 'x' });
    assert.equal(narrowed.statusCode, 200, narrowed.body);
    assert.deepEqual({ deletedCount: narrowed.json().deletedCount, skippedCount: narrowed.json().skippedCount }, { deletedCount: 0, skippedCount: 1 });
    const narrowedShared = await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminA, { ids: [personal._id, inA2._id], shared: true });
    assert.deepEqual({ deletedCount: narrowedShared.json().deletedCount, skippedCount: narrowedShared.json().skippedCount }, { deletedCount: 1, skippedCount: 1 });
    assert.equal(await rowExists(inA2._id), false);
    // another account's admin gets 404, a plain user 403
    expectError(await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminB, { ids: [personal._id] }), 404, 'NOT_FOUND');
    expectError(await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.otherA1, { ids: [personal._id] }), 403, 'FORBIDDEN');
    expectError(await call('DELETE', `/api/admin/memory/user/${u.id}`, undefined, { ids: [personal._id] }), 401, 'UNAUTHENTICATED');
    expectError(await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminA, { ids: ['nope'] }), 400, 'VALIDATION_FAILED');
    assert.equal(await rowExists(personal._id), true);

    // the account admin may delete the remaining row
    const all = (await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminA, { ids: [personal._id] })).json();
    assert.equal(all.deletedCount, 1);
    assert.equal(all.skippedCount, 0);
  });

  test("the admin listing of a user's rows is bounded (USER_MEMORY_LIMIT rows, personal first, newest first)", async () => {
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const ut = (await login(t.app, u.email)).accessToken;
    const shared = await create(ut, { key_name: 'shared one', key_value: '1', shared: true, institution: w.a1.id });
    await t.database.db.execute(sql`insert into memory_params (id, author_user_id, key_name, key_value, created_at, updated_at)
      select gen_random_uuid()::text, ${u.id}, 'k' || n, 'v', now() - n * interval '1 second', now() from generate_series(1, ${USER_MEMORY_LIMIT + 5}) as n`);
    const listed = await call('GET', `/api/admin/memory/user/${u.id}`, tok.adminA);
    assert.equal(listed.statusCode, 200, listed.body.slice(0, 300));
    const groups = listed.json().data as Array<{ institution: { personal?: boolean }; items: Array<{ _id: string; key_name: string }> }>;
    assert.equal(groups.reduce((n, g) => n + g.items.length, 0), USER_MEMORY_LIMIT);
    assert.deepEqual(groups.map((g) => g.institution.personal === true), [true]);
    assert.deepEqual(groups[0]!.items.slice(0, 2).map((i) => i.key_name), ['k1', 'k2']);
    assert.equal(groups.some((g) => g.items.some((i) => i._id === shared._id)), false, 'the shared row is past the bound');
  });

  test('bulk delete by namespace and by the shared flag', async () => {
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const ut = (await login(t.app, u.email)).accessToken;
    const nsX1 = await create(ut, { key_name: 'a', key_value: '1', key_namespace: 'x' });
    const nsX2 = await create(ut, { key_name: 'b', key_value: '1', key_namespace: 'x', shared: true });
    const nsY = await create(ut, { key_name: 'c', key_value: '1', key_namespace: 'y' });
    const sharedY = await create(ut, { key_name: 'd', key_value: '1', key_namespace: 'y', shared: true });
    const otherUserX = await create(tok.userA1, { key_name: 'e', key_value: '1', key_namespace: 'x' });

    // institution admin: the personal row of namespace x is skipped, the shared one deleted
    const byInstAdmin = (await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.instAdminA1, { namespace: 'x' })).json();
    assert.deepEqual([byInstAdmin.deletedCount, byInstAdmin.skippedCount], [1, 1]);
    assert.equal(await rowExists(nsX2._id), false);
    assert.equal(await rowExists(nsX1._id), true);

    // the namespace is trimmed as stored values are; a blank one is no namespace at all
    expectError(await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminA, { namespace: '   ' }), 400, 'VALIDATION_FAILED');
    assert.equal(await rowExists(nsX1._id), true);
    const byNamespace = (await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminA, { namespace: ' x ' })).json();
    assert.deepEqual([byNamespace.deletedCount, byNamespace.skippedCount], [1, 0]);
    assert.equal(await rowExists(nsX1._id), false);
    assert.equal(await rowExists(otherUserX._id), true, "another user's row of the same namespace stays");
    assert.equal(await rowExists(nsY._id), true);

    const personalOnly = (await call('DELETE', `/api/admin/memory/user/${u.id}`, tok.adminA, { shared: false })).json();
    assert.equal(personalOnly.deletedCount, 1);
    assert.equal(await rowExists(nsY._id), false);
    assert.equal(await rowExists(sharedY._id), true);

    // institution route: only shared rows of that institution, per row; personal and foreign ids skipped
    const mineA1 = await create(tok.userA1, { key_name: 'f', key_value: '1', key_namespace: 'z', shared: true });
    const inA2 = await create(tok.userA2, { key_name: 'g', key_value: '1', shared: true });
    const res = (await call('DELETE', `/api/admin/memory/institution/${w.a1.id}`, tok.instAdminA1, { ids: [sharedY._id, otherUserX._id, inA2._id] })).json();
    assert.deepEqual([res.deletedCount, res.skippedCount], [1, 2]);
    assert.equal(await rowExists(sharedY._id), false);
    assert.equal(await rowExists(otherUserX._id), true);
    assert.equal(await rowExists(inA2._id), true);
    expectError(await call('DELETE', `/api/admin/memory/institution/${w.a2.id}`, tok.instAdminA1, {}), 403, 'FORBIDDEN');
    expectError(await call('DELETE', `/api/admin/memory/institution/${w.a1.id}`, tok.adminB, {}), 404, 'NOT_FOUND');
    const byNs = (await call('DELETE', `/api/admin/memory/institution/${w.a1.id}`, tok.instAdminA1, { namespace: 'z' })).json();
    assert.deepEqual([byNs.deletedCount, byNs.skippedCount], [1, 0]);
    assert.equal(await rowExists(mineA1._id), false);
    assert.equal(await rowExists(inA2._id), true);
  });

  test('the list is cached per author and per institution, and every write path invalidates it', async () => {
    const writer = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const wt = (await login(t.app, writer.email)).accessToken;
    const visible = async (token: string) => (await call('GET', '/api/user/memory', token)).json().data as any[];
    const shared = await create(wt, { key_name: 'cached', key_value: '1', shared: true });
    assert.ok((await visible(tok.otherA1)).some((r) => r._id === shared._id));

    // a row written behind the service's back is not seen: the answer comes from the cache
    const hidden = newId();
    await t.database.db.insert(memoryParams).values({ id: hidden, authorUserId: writer.id, institutionId: w.a1.id, keyName: 'hidden', keyValue: '1', shared: true });
    assert.ok(!(await visible(tok.otherA1)).some((r) => r._id === hidden));
    // a write through the API invalidates the institution's list
    const second = await create(wt, { key_name: 'second', key_value: '1', shared: true });
    const after = await visible(tok.otherA1);
    assert.ok(after.some((r) => r._id === hidden) && after.some((r) => r._id === second._id));

    // personal rows: create, update, delete are seen at once by their author
    const personal = await create(wt, { key_name: 'mine', key_value: 'v1' });
    assert.equal((await visible(wt)).find((r) => r._id === personal._id)?.key_value, 'v1');
    await call('PUT', `/api/user/memory/${personal._id}`, wt, { key_value: 'v2' });
    assert.equal((await visible(wt)).find((r) => r._id === personal._id)?.key_value, 'v2');

    // an admin bulk delete
    await call('DELETE', `/api/admin/memory/institution/${w.a1.id}`, tok.instAdminA1, { ids: [second._id] });
    assert.ok(!(await visible(tok.otherA1)).some((r) => r._id === second._id));

    // renaming the institution changes the institution object of its shared rows
    const renamed = await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.adminA, { ainame: 'Isaac' });
    assert.equal(renamed.statusCode, 200);
    assert.equal((await visible(tok.otherA1)).find((r) => r._id === shared._id)?.institution.ainame, 'Isaac');

    // deleting the writer deletes their shared rows (cascade): other members stop seeing them
    assert.equal((await call('DELETE', `/api/admin/user/${writer.id}`, tok.adminA)).statusCode, 200);
    const gone = await visible(tok.otherA1);
    assert.ok(!gone.some((r) => r._id === shared._id || r._id === hidden));
  });

  test("a session's answer is kept while its lists and its roles are unchanged; a role or membership change is seen at once", async () => {
    const author = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const viewer = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const at = (await login(t.app, author.email)).accessToken;
    const vt = (await login(t.app, viewer.email)).accessToken;
    const row = await create(at, { key_name: 'memo', key_value: '1', shared: true });
    const mine = await create(vt, { key_name: 'own', key_value: '1' });
    const list = async () => {
      const res = await call('GET', '/api/user/memory', vt);
      assert.equal(res.statusCode, 200);
      return { body: res.body, rows: res.json().data as any[] };
    };
    const first = await list();
    assert.deepEqual(
      first.rows.filter((r) => r._id === row._id || r._id === mine._id).map((r) => [r._id, r.editable, r.isAuthor]),
      [
        [mine._id, true, true],
        [row._id, false, false],
      ],
    );
    assert.equal((await list()).body, first.body);

    // promoted to admin of the institution: the same token now may edit the author's shared row
    const promote = await call('POST', '/api/admin/membership', tok.adminA, { user: viewer.id, institution: w.a1.id, role: 'admin' });
    assert.equal(promote.statusCode, 200, promote.body);
    assert.equal((await list()).rows.find((r) => r._id === row._id)?.editable, true);

    // a personal row written through the API is in the next answer
    const added = await create(vt, { key_name: 'added', key_value: '1' });
    assert.ok((await list()).rows.some((r) => r._id === added._id));

    // enrolment ended: the institution's shared rows leave the answer, the personal ones stay
    const unenrol = await call('DELETE', '/api/admin/membership', tok.adminA, { user: viewer.id, institution: w.a1.id });
    assert.equal(unenrol.statusCode, 200, unenrol.body);
    const last = await list();
    assert.ok(!last.rows.some((r) => r._id === row._id));
    assert.deepEqual(
      last.rows.map((r) => r._id),
      [added._id, mine._id],
    );
  });
});

/** n memory rows (only their identity matters to the cache). */
const rows = (n: number) => Array.from({ length: n }, () => ({ id: newId() }) as unknown as MemoryWithInstitution);

test('memory cache: bounded by rows held (oldest entry first), stale loads not stored', async () => {
  const bus = new LocalInvalidationBus();
  const cache = new MemoryCache(bus, systemClock, { maxRows: 3 });
  let loads = 0;
  const load = (n: number) => async () => {
    loads++;
    return rows(n);
  };
  await cache.personalOf('u1', load(2));
  await cache.sharedOf('i1', load(1));
  await cache.personalOf('u1', load(2));
  assert.equal(loads, 2, 'both entries cached (3 rows)');
  await cache.sharedOf('i2', load(2)); // 5 rows > 3: u1 (oldest personal) goes
  await cache.personalOf('u1', load(2));
  assert.equal(loads, 4, 'u1 was evicted and loaded again');

  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const pending = cache.sharedOf('i3', async () => {
    await gate;
    return rows(1);
  });
  await bus.publish('memory-shared', { id: 'i3' });
  release();
  await pending;
  await cache.sharedOf('i3', load(1));
  assert.equal(loads, 5, 'the load that raced an invalidation was not stored');
  cache.close();
});

test('memory cache: misses of one key share one load, and count its rows once; empty lists count against the bound', async () => {
  const bus = new LocalInvalidationBus();
  const cache = new MemoryCache(bus, systemClock, { maxRows: 10 });
  let loads = 0;
  const load = (n: number) => async () => {
    loads++;
    await new Promise((r) => setImmediate(r));
    return rows(n);
  };
  // three requests of one user miss together: one load, the same rows for all
  const [a, b, c] = await Promise.all([cache.personalOf('u1', load(5)), cache.personalOf('u1', load(5)), cache.personalOf('u1', load(5))]);
  assert.equal(loads, 1, 'one load for the burst');
  assert.ok(a === b && b === c);
  await cache.personalOf('u2', load(5)); // 5 + 5 = 10 rows: both fit (counted twice, u1 would be evicted)
  await cache.personalOf('u1', load(5));
  await cache.personalOf('u2', load(5));
  assert.equal(loads, 2, 'u1 and u2 both held');
  // a miss after an invalidation does not join the load that started before it
  await bus.publish('memory-personal', { id: 'u3' });
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const before = cache.personalOf('u3', async () => {
    loads++;
    await gate;
    return rows(1);
  });
  await bus.publish('memory-personal', { id: 'u3' });
  const fresh = cache.personalOf('u3', load(2));
  release();
  assert.equal((await before).length, 1);
  assert.equal((await fresh).length, 2, 'read again after the invalidation');
  assert.equal(loads, 4);
  assert.equal((await cache.personalOf('u3', load(3))).length, 2, 'the fresh read is the one held');
  assert.equal(loads, 4);
  cache.close();

  const small = new MemoryCache(bus, systemClock, { maxRows: 2 });
  let empties = 0;
  const empty = async () => {
    empties++;
    return rows(0);
  };
  for (const id of ['e1', 'e2', 'e3']) await small.sharedOf(id, empty);
  await small.sharedOf('e1', empty); // three empty lists against a bound of 2: the oldest went
  assert.equal(empties, 4);
  small.close();
});

test('memory cache: a list is read again after maxAgeMs even without an invalidation (one lost on the way)', async () => {
  const clock = new ManualClock(1_000_000);
  const cache = new MemoryCache(new LocalInvalidationBus(), clock, { maxRows: 100, maxAgeMs: 60_000 });
  let loads = 0;
  const load = async () => {
    loads++;
    return rows(1);
  };
  await cache.personalOf('u1', load);
  clock.advance(59_999);
  await cache.personalOf('u1', load);
  assert.equal(loads, 1);
  clock.advance(1);
  await cache.personalOf('u1', load);
  assert.equal(loads, 2);
  cache.close();
});

test('memory answers: one per session, made of the same objects or not at all, bounded by entries and bytes', () => {
  const memo = new AnswerMemo<object>({ maxEntries: 3, maxBytes: 100, maxAnswerBytes: 60 });
  const user = {};
  const [a, b] = [rows(2), rows(1)];
  const answer = (key: object, bytes: number, parts = [a, b]) => ({ key, user, parts, body: Buffer.alloc(bytes) });
  const s1 = {};
  memo.set(answer(s1, 10));
  assert.equal(memo.get(s1, user, [a, b])?.length, 10);
  // another user row, another list, a list more or less: not this answer
  assert.equal(memo.get(s1, {}, [a, b]), undefined);
  assert.equal(memo.get(s1, user, [a, rows(1)]), undefined);
  assert.equal(memo.get(s1, user, [a]), undefined);
  assert.equal(memo.get({}, user, [a, b]), undefined);
  // a session's new answer replaces its old one
  memo.set(answer(s1, 20));
  assert.deepEqual(memo.size, { entries: 1, bytes: 20 });
  // entries: the oldest goes first
  const [s2, s3, s4] = [{}, {}, {}];
  for (const s of [s2, s3, s4]) memo.set(answer(s, 10));
  assert.deepEqual(memo.size, { entries: 3, bytes: 30 });
  assert.equal(memo.get(s1, user, [a, b]), undefined);
  // bytes: 30 + 50 + 50 > 100, so the oldest go until it fits
  memo.set(answer({}, 50));
  memo.set(answer({}, 50));
  assert.deepEqual(memo.size, { entries: 2, bytes: 100 });
  // an answer over maxAnswerBytes is not kept, and takes the session's older one with it
  const big = {};
  memo.set(answer(big, 10));
  memo.set(answer(big, 61));
  assert.equal(memo.get(big, user, [a, b]), undefined);
  assert.ok(memo.size.bytes <= 100 && memo.size.entries <= 3);
});

test('merging the lists of GET /api/user/memory gives the order of sorting them, limit included', () => {
  // times in few distinct milliseconds (many ties, broken by id); ids not in time order half the time
  let seed = 7;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const row = () => ({ id: newId(), createdAt: new Date(1_700_000_000_000 + Math.floor(random() * 5)) }) as unknown as MemoryWithInstitution;
  const sorted = (parts: MemoryWithInstitution[][]) => parts.flat().sort(newestFirst).slice(0, USER_MEMORY_LIMIT);
  for (let round = 0; round < 200; round++) {
    const parts = Array.from({ length: 2 + Math.floor(random() * 4) }, () => Array.from({ length: Math.floor(random() * 12) }, row));
    // as the database returns them (newest first), except now and then a list in another order: the sort fallback
    for (const p of parts) if (round % 5 !== 0) p.sort(newestFirst);
    assert.deepEqual(mergeNewestFirst(parts), sorted(parts));
  }
  const big = [Array.from({ length: 3000 }, row).sort(newestFirst), Array.from({ length: 3000 }, row).sort(newestFirst)];
  const merged = mergeNewestFirst(big);
  assert.equal(merged.length, USER_MEMORY_LIMIT);
  assert.deepEqual(merged, sorted(big));
});
