import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { and, eq } from 'drizzle-orm';
import { settings } from '../src/db/schema.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

describe('settings (instance variables)', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const tok = {} as Record<'adminA' | 'instAdminA1' | 'userA1' | 'otherA1' | 'userA2' | 'userB1' | 'root', string>;

  const call = (method: Method, url: string, token?: string, payload?: unknown, headers: Record<string, string> = {}) =>
    t.app.inject({ method, url, headers: { ...(token ? bearer(token) : {}), ...headers }, ...(payload !== undefined ? { payload: payload as object } : {}) });

  const expectError = (res: { statusCode: number; json(): any }, status: number, code: string) => {
    assert.equal(res.statusCode, status, res.statusCode !== status ? JSON.stringify(res.json()) : '');
    assert.equal(res.json().success, false);
    assert.equal(res.json().error.code, code);
    return res.json();
  };

  const create = async (token: string, payload: Record<string, unknown>) => {
    const res = await call('POST', '/api/user/setting', token, payload);
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data;
  };

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    const otherA1 = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    for (const [name, user] of Object.entries({ adminA: w.accountAdminA, instAdminA1: w.adminA1, userA1: w.userA1, otherA1, userA2: w.userA2, userB1: w.userB1, root: w.superadmin })) {
      tok[name as keyof typeof tok] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(() => t.close());

  test('create takes institution and user from the token; status active, __v 0; validation and 401', async () => {
    const res = await call('POST', '/api/user/setting', undefined, { key: 'k' }, { 'x-access-token': tok.userA1 });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.success, true);
    assert.equal(typeof body.message, 'string');
    assert.equal(body.data.key, 'k');
    assert.equal(body.data.institution, w.a1.id);
    assert.equal(body.data.user, w.userA1.id);
    assert.equal(body.data.status, 'active');
    assert.equal(body.data.__v, 0);
    assert.equal(body.data.value, undefined);
    assert.deepEqual([body.data.admin_only, body.data.editable_others, body.data.institution_shared], [false, false, true]);

    expectError(await call('POST', '/api/user/setting', undefined, { key: 'k2' }), 401, 'UNAUTHENTICATED');
    const missing = expectError(await call('POST', '/api/user/setting', tok.userA1, { value: 'v' }), 400, 'VALIDATION_FAILED');
    assert.ok(missing.error.details.some((d: any) => d.field === 'key'));
    expectError(await call('POST', '/api/user/setting', tok.userA1, { key: '  ' }), 400, 'VALIDATION_FAILED');
    // the same key in the same institution is a 400; in another institution it is fine
    const dup = expectError(await call('POST', '/api/user/setting', tok.otherA1, { key: 'k', value: 'other' }), 400, 'DUPLICATE_KEY');
    assert.equal(dup.error.details[0].field, 'key');
    assert.equal((await create(tok.userA2, { key: 'k' })).institution, w.a2.id);
  });

  test('20 concurrent creates of one key: exactly one succeeds, the other 19 are 400 DUPLICATE_KEY', async () => {
    // The unique index on (institution, key) decides, in one INSERT … ON CONFLICT DO NOTHING. PGlite runs
    // one statement at a time, and this test was seen to pass with a check-then-insert version too: it
    // shows the observable rule (one 200, nineteen 400s, one row), not a race won under real concurrency.
    // What makes the rule hold on PostgreSQL is the single statement against the unique index.
    const key = `race-${newId()}`;
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => call('POST', '/api/user/setting', i % 2 ? tok.userA1 : tok.otherA1, { key, value: String(i) })));
    const statuses = results.map((r) => r.statusCode).sort();
    assert.deepEqual(statuses, [200, ...Array(19).fill(400)]);
    for (const r of results.filter((x) => x.statusCode === 400)) assert.equal(r.json().error.code, 'DUPLICATE_KEY');
    const rows = await t.database.db.select().from(settings).where(and(eq(settings.institutionId, w.a1.id), eq(settings.key, key)));
    assert.equal(rows.length, 1);
  });

  test('update increments __v; a stale __v is a 409; renaming onto a taken key is a 400', async () => {
    const s = await create(tok.userA1, { key: 'theme', value: 'dark' });
    const u1 = await call('PUT', `/api/user/setting/${s._id}`, tok.userA1, { value: 'light' });
    assert.equal(u1.statusCode, 200);
    assert.equal(u1.json().data.__v, 1);
    assert.equal(u1.json().data.value, 'light');
    const u2 = (await call('PUT', `/api/user/setting/${s._id}`, tok.userA1, { value: 'blue', __v: 1 })).json();
    assert.equal(u2.data.__v, 2);
    expectError(await call('PUT', `/api/user/setting/${s._id}`, tok.userA1, { value: 'stale', __v: 1 }), 409, 'CONFLICT');
    // a revision no setting can have (the counter is a 32-bit integer) is a bad field, named, not the database's refusal
    for (const v of [2_147_483_648, 1e20, -1, 1.5]) {
      const res = await call('PUT', `/api/user/setting/${s._id}`, tok.userA1, { value: 'x', __v: v });
      expectError(res, 400, 'VALIDATION_FAILED');
      assert.equal(res.json().error.details[0].field, '__v', String(v));
    }
    await create(tok.userA1, { key: 'taken' });
    expectError(await call('PUT', `/api/user/setting/${s._id}`, tok.userA1, { key: 'taken' }), 400, 'DUPLICATE_KEY');
    const after = (await call('GET', `/api/user/settings?key=theme`, tok.userA1)).json();
    assert.deepEqual([after.total, after.data[0].value, after.data[0].__v], [1, 'blue', 2]);
    expectError(await call('PUT', `/api/user/setting/${newId()}`, tok.userA1, { value: 'x' }), 404, 'NOT_FOUND');
  });

  test('visibility: admin_only for admins, institution_shared false for creator and admins, editable_others', async () => {
    expectError(await call('POST', '/api/user/setting', tok.userA1, { key: 'secret', admin_only: true }), 403, 'FORBIDDEN');
    const adminOnly = await create(tok.instAdminA1, { key: 'secret', value: 's3', admin_only: true });
    const privateOne = await create(tok.userA1, { key: 'mine', institution_shared: false });
    const locked = await create(tok.userA1, { key: 'locked', value: '1' });
    const open = await create(tok.userA1, { key: 'open', value: '1', editable_others: true });

    const keysOf = async (token: string, query = '') => (await call('GET', `/api/user/settings?pageSize=5000${query}`, token)).json().data.map((s: any) => s.key);
    const member = await keysOf(tok.otherA1);
    assert.ok(!member.includes('secret') && !member.includes('mine'));
    assert.ok(member.includes('locked') && member.includes('open'));
    const creator = await keysOf(tok.userA1);
    assert.ok(creator.includes('mine') && !creator.includes('secret'));
    const admin = await keysOf(tok.instAdminA1);
    assert.ok(admin.includes('secret') && admin.includes('mine'));
    const accountAdmin = await keysOf(tok.adminA, `&institution=${w.a1.id}`);
    assert.ok(accountAdmin.includes('secret'));

    expectError(await call('PUT', `/api/user/setting/${adminOnly._id}`, tok.userA1, { value: 'x' }), 404, 'NOT_FOUND');
    expectError(await call('PUT', `/api/user/setting/${privateOne._id}`, tok.otherA1, { value: 'x' }), 404, 'NOT_FOUND');
    expectError(await call('PUT', `/api/user/setting/${locked._id}`, tok.otherA1, { value: 'x' }), 403, 'FORBIDDEN');
    expectError(await call('DELETE', `/api/user/setting/${locked._id}`, tok.otherA1), 403, 'FORBIDDEN');
    expectError(await call('PUT', `/api/user/setting/${locked._id}`, tok.userA1, { admin_only: true }), 403, 'FORBIDDEN');
    assert.equal((await call('PUT', `/api/user/setting/${open._id}`, tok.otherA1, { value: '2' })).json().data.value, '2');
    // a member who may edit another's setting may not hide or lock it; the creator and admins may
    for (const flags of [{ institution_shared: false }, { editable_others: false }, { value: '9', institution_shared: false }]) {
      const refused = expectError(await call('PUT', `/api/user/setting/${open._id}`, tok.otherA1, flags), 403, 'FORBIDDEN');
      assert.match(refused.message, /institution_shared or editable_others/u);
    }
    assert.ok((await keysOf(tok.otherA1)).includes('open'));
    assert.equal((await call('PUT', `/api/user/setting/${open._id}`, tok.otherA1, { value: '2', editable_others: true })).statusCode, 200, 'the same value is no change');
    assert.equal((await call('PUT', `/api/user/setting/${locked._id}`, tok.instAdminA1, { value: '3' })).json().data.__v, 1);

    // other tenants: 404 for the record and for the institution's list
    expectError(await call('PUT', `/api/user/setting/${locked._id}`, tok.userB1, { value: 'x' }), 404, 'NOT_FOUND');
    expectError(await call('GET', `/api/user/settings?institution=${w.a1.id}`, tok.userB1), 404, 'NOT_FOUND');
    expectError(await call('GET', `/api/user/settings?institution=${w.a1.id}`, tok.userA2), 404, 'NOT_FOUND');

    assert.equal((await call('DELETE', `/api/user/setting/${locked._id}`, tok.userA1)).statusCode, 200);
    expectError(await call('DELETE', `/api/user/setting/${locked._id}`, tok.userA1), 404, 'NOT_FOUND');
  });

  test('keys are compared in Unicode NFC and trimmed, on create, rename and the list filter; invisible characters are refused', async () => {
    const composed = await create(tok.userA1, { key: 'caf\u00e9', value: 'v' });
    assert.equal(composed.key, 'caf\u00e9');
    // the same key typed decomposed (e + combining acute) is the same key: a duplicate
    expectError(await call('POST', '/api/user/setting', tok.otherA1, { key: 'cafe\u0301' }), 400, 'DUPLICATE_KEY');
    const other = await create(tok.userA1, { key: 'tea' });
    expectError(await call('PUT', `/api/user/setting/${other._id}`, tok.userA1, { key: ' cafe\u0301 ' }), 400, 'DUPLICATE_KEY');
    // the list filter finds it whichever way it is typed, spaces around it included
    for (const key of ['cafe\u0301', ' caf\u00e9 ']) {
      const listed = await call('GET', `/api/user/settings?key=${encodeURIComponent(key)}`, tok.userA1);
      assert.equal(listed.statusCode, 200, listed.body);
      assert.deepEqual(listed.json().data.map((r: any) => r._id), [composed._id], JSON.stringify(key));
    }
    // zero-width, bidi and control characters would make keys that look like others
    for (const key of ['\u200b', 'caf\u00e9\u200b', 'a\u202eb', 'a\u0007b', 'a\u2028b']) {
      const refused = expectError(await call('POST', '/api/user/setting', tok.userA1, { key }), 400, 'VALIDATION_FAILED');
      assert.equal(refused.error.details[0].field, 'key', JSON.stringify(key));
    }
    expectError(await call('PUT', `/api/user/setting/${other._id}`, tok.userA1, { key: 'te\u200ba' }), 400, 'VALIDATION_FAILED');
  });

  test('list paginates with the admin envelope', async () => {
    const res = (await call('GET', '/api/user/settings?pageSize=2&page=1', tok.instAdminA1)).json();
    assert.equal(res.success, true);
    assert.equal(res.pageSize, 2);
    assert.equal(res.data.length, 2);
    assert.equal(res.hasMore, res.total > 2);
    const last = Math.ceil(res.total / 2);
    const lastPage = (await call('GET', `/api/user/settings?pageSize=2&page=${last}`, tok.instAdminA1)).json();
    assert.equal(lastPage.hasMore, false);
    assert.ok(lastPage.data.length >= 1);
    expectError(await call('GET', '/api/user/settings?pageSize=5001', tok.instAdminA1), 400, 'VALIDATION_FAILED');
    expectError(await call('GET', '/api/user/settings?page=0', tok.instAdminA1), 400, 'VALIDATION_FAILED');
  });
});
