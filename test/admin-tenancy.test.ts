import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import { rowsOf, type Db } from '../src/db/client.js';
import { sql } from 'drizzle-orm';
import * as schema from '../src/db/schema.js';
import { transferCredits } from '../src/modules/tenancy/credits.repository.js';
import { findUserById } from '../src/modules/identity/identity.repository.js';
import { findAccount, findInstitution, updateInstitution } from '../src/modules/tenancy/tenancy.repository.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeAccount, makeInstitution, makeUser, makeWorld, PASSWORD, startTestApp, type TestApp } from './support/app.js';

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

describe('admin management routes (accounts, institutions, users, memberships, credits)', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const tok: Record<'root' | 'adminA' | 'adminB' | 'instAdminA1' | 'userA1', string> = { root: '', adminA: '', adminB: '', instAdminA1: '', userA1: '' };

  const call = (method: Method, url: string, token?: string, payload?: unknown) =>
    t.app.inject({ method, url, headers: token ? bearer(token) : {}, ...(payload !== undefined ? { payload: payload as object } : {}) });

  const expectError = (res: { statusCode: number; json(): any }, status: number, code: string) => {
    assert.equal(res.statusCode, status, JSON.stringify(res.json()));
    const body = res.json();
    assert.equal(body.success, false);
    assert.equal(body.error.code, code);
    assert.equal(typeof body.message, 'string');
    assert.ok(Array.isArray(body.error.details));
    return body;
  };

  const expectInvalid = (res: { statusCode: number; json(): any }, field: string) => {
    const body = expectError(res, 400, 'VALIDATION_FAILED');
    assert.ok(
      body.error.details.some((d: { field?: string }) => d.field === field),
      `expected a detail for ${field}, got ${JSON.stringify(body.error.details)}`,
    );
  };

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    tok.root = (await login(t.app, w.superadmin.email)).accessToken;
    tok.adminA = (await login(t.app, w.accountAdminA.email)).accessToken;
    tok.adminB = (await login(t.app, w.accountAdminB.email)).accessToken;
    tok.instAdminA1 = (await login(t.app, w.adminA1.email)).accessToken;
    tok.userA1 = (await login(t.app, w.userA1.email)).accessToken;
  });
  after(() => t.close());

  // ───────────── every route: 401, 403 for a plain user, 404 for another account's admin ─────────────

  test('every admin route: 401 without token, 403 for a plain user, 404 (or documented 403) for the account admin of another account', async () => {
    const routes: Array<{ method: Method; url: string; payload?: unknown; otherAccountAdmin: number }> = [
      { method: 'POST', url: '/api/admin/account', payload: { name: 'Nope' }, otherAccountAdmin: 403 },
      { method: 'GET', url: `/api/admin/account/${w.accountA.id}`, otherAccountAdmin: 404 },
      { method: 'PATCH', url: `/api/admin/account/${w.accountA.id}`, payload: { name: 'Hijacked' }, otherAccountAdmin: 404 },
      { method: 'DELETE', url: `/api/admin/account/${w.accountA.id}`, otherAccountAdmin: 404 },
      { method: 'POST', url: '/api/admin/institution', payload: { account: w.accountA.id, name: 'X', ainame: 'Y' }, otherAccountAdmin: 404 },
      { method: 'GET', url: `/api/admin/institution/${w.a1.id}`, otherAccountAdmin: 404 },
      { method: 'PATCH', url: `/api/admin/institution/${w.a1.id}`, payload: { about: 'hijacked' }, otherAccountAdmin: 404 },
      { method: 'DELETE', url: `/api/admin/institution/${w.a1.id}`, otherAccountAdmin: 404 },
      { method: 'POST', url: `/api/admin/institution/${w.a1.id}/credits`, payload: { amount: 5 }, otherAccountAdmin: 404 },
      {
        method: 'POST',
        url: '/api/admin/user',
        payload: { email: 'intruder@example.com', password: 'long-enough-1', fname: 'I', lname: 'N', account: w.accountA.id, institutions: [] },
        otherAccountAdmin: 404,
      },
      { method: 'GET', url: `/api/admin/user/${w.userA1.id}`, otherAccountAdmin: 404 },
      { method: 'PATCH', url: `/api/admin/user/${w.userA1.id}`, payload: { fname: 'Hijacked' }, otherAccountAdmin: 404 },
      { method: 'DELETE', url: `/api/admin/user/${w.userA1.id}`, otherAccountAdmin: 404 },
      { method: 'POST', url: `/api/admin/user/${w.userA1.id}/credits`, payload: { amount: 5 }, otherAccountAdmin: 404 },
      { method: 'POST', url: '/api/admin/credits/transfer', payload: { from: { institution: w.a1.id }, to: { user: w.userA1.id }, amount: 1 }, otherAccountAdmin: 404 },
      { method: 'POST', url: '/api/admin/membership', payload: { user: w.userA1.id, institution: w.a1.id, role: 'admin' }, otherAccountAdmin: 404 },
      { method: 'DELETE', url: '/api/admin/membership', payload: { user: w.userA1.id, institution: w.a1.id }, otherAccountAdmin: 404 },
    ];
    const listings: Array<{ method: Method; url: string; payload?: unknown }> = [
      { method: 'POST', url: '/api/admin/accounts', payload: {} },
      { method: 'GET', url: '/api/admin/institutions' },
      { method: 'GET', url: '/api/admin/users' },
    ];
    for (const r of [...routes, ...listings]) {
      const anon = await call(r.method, r.url, undefined, r.payload);
      expectError(anon, 401, 'UNAUTHENTICATED');
      const plain = await call(r.method, r.url, tok.userA1, r.payload);
      expectError(plain, 403, 'FORBIDDEN');
      // auth and the role gate run before validation: a broken body does not change the answer
      if (r.payload !== undefined) expectError(await call(r.method, r.url, tok.userA1, { name: 42, amount: 'x', user: 7 }), 403, 'FORBIDDEN');
    }
    for (const r of routes) {
      const res = await call(r.method, r.url, tok.adminB, r.payload);
      expectError(res, r.otherAccountAdmin, r.otherAccountAdmin === 404 ? 'NOT_FOUND' : 'FORBIDDEN');
    }
    // nothing was changed by the attempts
    assert.equal((await findAccount(t.database.db, w.accountA.id))?.name, 'Acme University');
    assert.equal(Number((await findInstitution(t.database.db, w.a1.id))?.credits), 0);
    assert.equal((await findUserById(t.database.db, w.userA1.id))?.fname, 'Test');
    // listings are scoped, never 404: account admin B sees only its own tenant
    const accounts = (await call('POST', '/api/admin/accounts', tok.adminB, {})).json();
    assert.deepEqual(accounts.data.map((a: any) => a._id), [w.accountB.id]);
    const insts = (await call('GET', `/api/admin/institutions?account=${w.accountA.id}`, tok.adminB)).json();
    assert.equal(insts.total, 0);
    const users = (await call('GET', '/api/admin/users?pageSize=5000', tok.adminB)).json();
    assert.ok(users.data.length > 0);
    assert.ok(users.data.every((u: any) => u.account === w.accountB.id));
  });

  // ───────────── accounts ─────────────

  test('accounts: superadmin creates, reads, edits and deletes; account admin reads and edits its own only', async () => {
    const created = await call('POST', '/api/admin/account', tok.root, { name: '  Gamma Institute ', managerEmail: 'boss@gamma.test' });
    assert.equal(created.statusCode, 201);
    const acc = created.json();
    assert.equal(acc.success, true);
    assert.equal(typeof acc.data._id, 'string');
    assert.equal(acc.data.name, 'Gamma Institute');
    assert.equal(acc.data.status, 'active');
    assert.equal(acc.data.lastActivityAt, null);

    const read = await call('GET', `/api/admin/account/${acc.data._id}`, tok.root);
    assert.equal(read.statusCode, 200);
    assert.equal(read.json().data.managerEmail, 'boss@gamma.test');
    const patched = await call('PATCH', `/api/admin/account/${acc.data._id}`, tok.root, { status: 'inactive', managerEmail: null });
    assert.equal(patched.statusCode, 200);
    assert.equal(patched.json().data.status, 'inactive');
    assert.equal(patched.json().data.managerEmail, null);

    // account admin of A
    expectError(await call('POST', '/api/admin/account', tok.adminA, { name: 'Mine' }), 403, 'FORBIDDEN');
    expectError(await call('GET', `/api/admin/account/${acc.data._id}`, tok.adminA), 404, 'NOT_FOUND');
    const own = await call('GET', `/api/admin/account/${w.accountA.id}`, tok.adminA);
    assert.equal(own.statusCode, 200);
    assert.equal(own.json().data.name, 'Acme University');
    const renamed = await call('PATCH', `/api/admin/account/${w.accountA.id}`, tok.adminA, { name: 'Acme University' , managerEmail: 'boss2@acme.test' });
    assert.equal(renamed.statusCode, 200);
    assert.equal(renamed.json().data.managerEmail, 'boss2@acme.test');
    expectError(await call('PATCH', `/api/admin/account/${w.accountA.id}`, tok.adminA, { status: 'inactive' }), 403, 'FORBIDDEN');
    expectError(await call('DELETE', `/api/admin/account/${w.accountA.id}`, tok.adminA), 403, 'FORBIDDEN');
    // institution admin: its account is visible but not administrable
    expectError(await call('GET', `/api/admin/account/${w.accountA.id}`, tok.instAdminA1), 403, 'FORBIDDEN');

    const del = await call('DELETE', `/api/admin/account/${acc.data._id}`, tok.root);
    assert.equal(del.statusCode, 200);
    assert.equal(del.json().success, true);
    expectError(await call('GET', `/api/admin/account/${acc.data._id}`, tok.root), 404, 'NOT_FOUND');
    expectError(await call('DELETE', `/api/admin/account/${acc.data._id}`, tok.root), 404, 'NOT_FOUND');
    // a superadmin cannot delete its own account
    expectError(await call('DELETE', `/api/admin/account/${w.accountA.id}`, tok.root), 403, 'FORBIDDEN');
  });

  test('accounts: validation 400s', async () => {
    expectInvalid(await call('POST', '/api/admin/account', tok.root, { name: 42 }), 'name');
    expectInvalid(await call('POST', '/api/admin/account', tok.root, {}), 'name');
    expectInvalid(await call('POST', '/api/admin/account', tok.root, { name: 'X', managerEmail: 'not-an-email' }), 'managerEmail');
    expectInvalid(await call('POST', '/api/admin/account', tok.root, { name: 'X', status: 'paused' }), 'status');
    expectInvalid(await call('PATCH', `/api/admin/account/${w.accountA.id}`, tok.root, { status: 'paused' }), 'status');
    expectInvalid(await call('PATCH', `/api/admin/account/${w.accountA.id}`, tok.root, { name: '' }), 'name');
  });

  test('account and institution names of invisible format characters only (zero-width spaces, joiners, bidi marks) are blank: 400, nothing changes', async () => {
    const invisible = ['\u200b', ' \u200b\u200d ', '\u2060\u200e\u202e'];
    const before = { account: (await findAccount(t.database.db, w.accountA.id))!.name, institution: (await findInstitution(t.database.db, w.a1.id))! };
    for (const name of invisible) {
      expectInvalid(await call('POST', '/api/admin/account', tok.root, { name }), 'name');
      expectInvalid(await call('PATCH', `/api/admin/account/${w.accountA.id}`, tok.root, { name }), 'name');
      expectInvalid(await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name, ainame: 'V' }), 'name');
      expectInvalid(await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'V', ainame: name }), 'ainame');
      expectInvalid(await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.root, { name }), 'name');
      expectInvalid(await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.root, { ainame: name }), 'ainame');
    }
    assert.equal((await findAccount(t.database.db, w.accountA.id))!.name, before.account);
    const after = (await findInstitution(t.database.db, w.a1.id))!;
    assert.deepEqual([after.name, after.ainame], [before.institution.name, before.institution.ainame]);
    // a visible name keeps its joiners: only the blank check looks through them
    const joined = await call('POST', '/api/admin/account', tok.root, { name: ' Caf\u00e9\u200dTeam ' });
    assert.equal(joined.statusCode, 201, joined.body);
    assert.equal(joined.json().data.name, 'Caf\u00e9\u200dTeam');
    assert.equal((await call('DELETE', `/api/admin/account/${joined.json().data._id}`, tok.root)).statusCode, 200); // the listings below count accounts
  });

  test('accounts listing: literal search, case-insensitive on name and managerEmail', async () => {
    const pct = await makeAccount(t.database, { name: 'Qx 100% Club', managerEmail: 'a@pct.test' });
    await makeAccount(t.database, { name: 'Qx 1000 Club', managerEmail: 'b@pct.test' });
    const under = await makeAccount(t.database, { name: 'Qx snake_case Ltd', managerEmail: 'c@under.test' });
    await makeAccount(t.database, { name: 'Qx snakeXcase Ltd', managerEmail: 'd@under.test' });
    const mail = await makeAccount(t.database, { name: 'Unrelated Name', managerEmail: 'Director@QXMAIL.test' });

    const search = async (accountsearch: string) => {
      const res = await call('POST', '/api/admin/accounts', tok.root, { accountsearch });
      assert.equal(res.statusCode, 200);
      return res.json().data.map((a: any) => a._id).sort();
    };
    assert.deepEqual(await search('100%'), [pct.id]);
    assert.deepEqual(await search('e_c'), [under.id]);
    assert.deepEqual(await search('QXMAIL'), [mail.id]);
    assert.deepEqual(await search('qxmail.TEST'), [mail.id]);
    assert.equal((await search('qx ')).length, 4);
    assert.deepEqual(await search('\\'), []);
    assert.deepEqual(await search('%'), [pct.id]);
  });

  test('names and e-mails sent decomposed (NFD) are stored in NFC: each listing finds them by their exact text, a substring and the composed spelling', async () => {
    // "é" as e + U+0301, as macOS and many copy-pastes write it
    const acct = await call('POST', '/api/admin/account', tok.root, { name: 'Cafe\u0301 Nume\u0301rique Qz', managerEmail: 'direction@cafe-qz.test' });
    assert.equal(acct.statusCode, 201, acct.body);
    assert.equal(acct.json().data.name, 'Caf\u00e9 Num\u00e9rique Qz', 'stored (and returned) in NFC');
    const accounts = async (accountsearch: string) => {
      const res = await call('POST', '/api/admin/accounts', tok.root, { accountsearch });
      assert.equal(res.statusCode, 200, res.body);
      return res.json().data.map((a: any) => a._id);
    };
    for (const term of ['Cafe\u0301 Nume\u0301rique Qz', 'Cafe\u0301', 'e\u0301rique q', 'CAF\u00c9 NUM\u00c9RIQUE QZ']) {
      assert.deepEqual(await accounts(term), [acct.json().data._id], JSON.stringify(term));
    }
    // renamed decomposed: still found
    assert.equal((await call('PATCH', `/api/admin/account/${acct.json().data._id}`, tok.root, { name: 'Bre\u0301sil Qz' })).statusCode, 200);
    assert.deepEqual(await accounts('Br\u00e9sil qz'), [acct.json().data._id]);

    const inst = await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Inst Qz Sante\u0301', ainame: 'He\u0301le\u0300ne Qz' });
    assert.equal(inst.statusCode, 201, inst.body);
    for (const term of ['Qz Sante\u0301', 'sant\u00e9', 'He\u0301le\u0300ne', 'H\u00c9L\u00c8NE']) {
      const res = (await call('GET', `/api/admin/institutions?search=${encodeURIComponent(term)}&pageSize=5000`, tok.root)).json();
      assert.deepEqual(res.data.map((i: any) => i._id), [inst.json().data._id], JSON.stringify(term));
    }

    const user = await call('POST', '/api/admin/user', tok.adminA, newUserBody({ fname: 'Zoe\u0301', lname: 'Bre\u0301zillon Qz' }));
    assert.equal(user.statusCode, 201, user.body);
    assert.equal(user.json().data.lname, 'Br\u00e9zillon Qz');
    for (const term of ['Bre\u0301zillon Qz', 'Bre\u0301z', 'br\u00e9zillon qz', 'ZO\u00c9']) {
      const res = (await call('GET', `/api/admin/users?search=${encodeURIComponent(term)}&pageSize=5000`, tok.adminA)).json();
      assert.deepEqual(res.data.map((u: any) => u._id), [user.json().data._id], JSON.stringify(term));
    }
    // Greek: Postgres lower-cases Σ to σ, never to the final ς; both sides are folded, so either spelling finds the other
    const greek = await call('POST', '/api/admin/user', tok.adminA, newUserBody({ fname: 'ΝΙΚΟΣ', lname: 'Παπαδόπουλος Qz' }));
    assert.equal(greek.statusCode, 201, greek.body);
    for (const term of ['νικος', 'ΝΙΚΟΣ', 'ΠΑΠΑΔΌΠΟΥΛΟΣ', 'παπαδόπουλοσ']) {
      const res = (await call('GET', `/api/admin/users?search=${encodeURIComponent(term)}&pageSize=5000`, tok.adminA)).json();
      assert.deepEqual(res.data.map((u: any) => u._id), [greek.json().data._id], JSON.stringify(term));
    }
    // e-mails (the admin route takes ASCII ones; create-admin, the bootstrap and the repository take any): one
    // e-mail whatever its form, found by either spelling, and the composed spelling of a decomposed one is taken
    const email = `zoe\u0301-${newId().slice(-6)}@acme.test`;
    const zoe = await makeUser(t.database, { accountId: w.accountA.id, email, memberships: { [w.a1.id]: 'user' } });
    assert.equal(zoe.email, email.normalize('NFC'));
    await login(t.app, email);
    await login(t.app, email.normalize('NFC').toUpperCase());
    for (const term of [email, email.normalize('NFC').toUpperCase()]) {
      const res = (await call('GET', `/api/admin/users?search=${encodeURIComponent(term)}`, tok.adminA)).json();
      assert.deepEqual(res.data.map((u: any) => u._id), [zoe.id], JSON.stringify(term));
    }
    await assert.rejects(makeUser(t.database, { accountId: w.accountA.id, email: email.normalize('NFC').toUpperCase() }), 'users_email_lower_uq: the same e-mail in NFC');
    await assert.rejects(makeUser(t.database, { accountId: w.accountA.id, email }), 'the same e-mail in NFD');
    // edited decomposed: stored composed
    const edited = await call('PATCH', `/api/admin/user/${user.json().data._id}`, tok.adminA, { lname: 'Mu\u0308ller Qz' });
    assert.equal(edited.json().data.lname, 'M\u00fcller Qz');
    const found = (await call('GET', `/api/admin/users?search=${encodeURIComponent('mu\u0308ller q')}`, tok.adminA)).json();
    assert.deepEqual(found.data.map((u: any) => u._id), [user.json().data._id]);
  });

  test('accounts listing: envelope, pagination, minimum, activeOnly, insitutionsUsage, scope and validation', async () => {
    for (let i = 1; i <= 5; i += 1) await makeAccount(t.database, { name: `Paging ${i}` });
    const p1 = (await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'paging', pageSize: 2 })).json();
    assert.deepEqual(Object.keys(p1).sort(), ['data', 'hasMore', 'message', 'page', 'pageSize', 'success', 'total']);
    assert.equal(p1.success, true);
    assert.equal(p1.total, 5);
    assert.equal(p1.page, 1);
    assert.equal(p1.pageSize, 2);
    assert.equal(p1.hasMore, true);
    assert.deepEqual(p1.data.map((a: any) => a.name), ['Paging 1', 'Paging 2']);
    const p3 = (await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'paging', pageSize: 2, page: 3 })).json();
    assert.deepEqual(p3.data.map((a: any) => a.name), ['Paging 5']);
    assert.equal(p3.hasMore, false);
    const defaults = (await call('POST', '/api/admin/accounts', tok.root)).json();
    assert.equal(defaults.page, 1);
    assert.equal(defaults.pageSize, 100);

    // minimum: {_id, name} and no pagination
    const min = (await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'paging', minimum: true, pageSize: 1, page: 4 })).json();
    assert.equal(min.total, 5);
    assert.equal(min.data.length, 5);
    assert.equal(min.page, 1);
    assert.equal(min.pageSize, 5);
    assert.equal(min.hasMore, false);
    for (const a of min.data) assert.deepEqual(Object.keys(a).sort(), ['_id', 'name']);

    // activeOnly: set once a user of the account starts a session
    const fresh = await makeAccount(t.database, { name: 'Sleepy Corp' });
    const inst = await makeInstitution(t.database, fresh.id);
    const sleeper = await makeUser(t.database, { accountId: fresh.id, memberships: { [inst.id]: 'user' } });
    const activeBefore = (await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'sleepy', activeOnly: true })).json();
    assert.equal(activeBefore.total, 0);
    assert.equal((await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'sleepy' })).json().total, 1);
    await login(t.app, sleeper.email);
    const activeAfter = (await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'sleepy', activeOnly: true })).json();
    assert.deepEqual(activeAfter.data.map((a: any) => a._id), [fresh.id]);
    assert.match(activeAfter.data[0].lastActivityAt, /^\d{4}-\d\d-\d\dT/);

    // insitutionsUsage numbers
    const billed = await makeAccount(t.database, { name: 'Billing Ltd' });
    const i1 = await makeInstitution(t.database, billed.id, { credits: 200 });
    await makeInstitution(t.database, billed.id, { credits: 33.5 });
    await updateInstitution(t.database.db, i1.id, { creditsUsed: 100 }, new Date());
    await makeAccount(t.database, { name: 'Billing Empty' });
    const usage = (await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'billing', insitutionsUsage: true })).json();
    const byName = Object.fromEntries(usage.data.map((a: any) => [a.name, a.institutionsUsage]));
    assert.deepEqual(byName['Billing Ltd'], { count: 2, credits: 233.5, creditsUsed: 100, creditsTotal: 333.5, creditsUsagePct: 29.99 });
    assert.deepEqual(byName['Billing Empty'], { count: 0, credits: 0, creditsUsed: 0, creditsTotal: 0, creditsUsagePct: 0 });
    const noUsage = (await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 'billing' })).json();
    assert.equal(noUsage.data[0].institutionsUsage, undefined);

    // scope: account admin only its own account, even when searching for others; institution admin 403
    const scoped = (await call('POST', '/api/admin/accounts', tok.adminA, { pageSize: 5000 })).json();
    assert.equal(scoped.total, 1);
    assert.deepEqual(scoped.data.map((a: any) => a._id), [w.accountA.id]);
    assert.equal((await call('POST', '/api/admin/accounts', tok.adminA, { accountsearch: 'beta' })).json().total, 0);
    expectError(await call('POST', '/api/admin/accounts', tok.instAdminA1, {}), 403, 'FORBIDDEN');

    // validation
    expectInvalid(await call('POST', '/api/admin/accounts', tok.root, { pageSize: 5001 }), 'pageSize');
    expectInvalid(await call('POST', '/api/admin/accounts', tok.root, { pageSize: 0 }), 'pageSize');
    expectInvalid(await call('POST', '/api/admin/accounts', tok.root, { page: 0 }), 'page');
    expectInvalid(await call('POST', '/api/admin/accounts', tok.root, { pageSize: '10' }), 'pageSize');
    expectInvalid(await call('POST', '/api/admin/accounts', tok.root, { activeOnly: 'yes' }), 'activeOnly');
    expectInvalid(await call('POST', '/api/admin/accounts', tok.root, { accountsearch: 5 }), 'accountsearch');
    assert.equal((await call('POST', '/api/admin/accounts', tok.root, { pageSize: 5000 })).statusCode, 200);
  });

  // ───────────── institutions ─────────────

  const fullInstitution = () => ({
    name: 'Complete Campus',
    ainame: 'Athena',
    picture: 'https://cdn.test/a.png',
    picture_bg: 'https://cdn.test/bg.png',
    picture_dark_bg: 'https://cdn.test/dark.png',
    picture_animated: '',
    voice_agent_id: 'voice-1',
    about: 'Helps with everything.',
    credits: 1500,
    creditAward: 25,
    maxCompletionTokens: 2048,
    maxFiles: 42,
    status: 'inactive',
    allowJoining: 'domain',
    questionType: 'socratic',
    rtVoice: 'alloy',
    joiningAdminOnly: true,
    poolCredits: false,
    disableFileUploadForUser: true,
    personalisationAsked: true,
    locationEnabled: true,
    rtEnabled: true,
    rtAdminOnly: true,
    displayAgentDetails: true,
    disableAssistantsForUser: true,
    publicAuthorizedUrls: ['https://site.test'],
    invoices_urls: ['https://billing.test/1.pdf'],
    toolsDisabled: ['web'],
    ltiContextIds: ['https://lms.test/course/1'],
    assistantsDisabled: ['asst-1'],
    contactEmail: 'help@campus.test',
    summaryModel: 'small-model',
    conversationModel: 'big-model',
  });

  test('institutions: superadmin creates with every field; presenter spells the spec fields', async () => {
    const res = await call('POST', '/api/admin/institution', tok.root, { account: w.accountB.id, ...fullInstitution() });
    assert.equal(res.statusCode, 201, res.body);
    const d = res.json().data;
    const input = fullInstitution();
    for (const [k, v] of Object.entries(input)) assert.deepEqual(d[k], v, k);
    assert.equal(d._id, d.id);
    assert.equal(d.account, w.accountB.id);
    assert.match(d.publicId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(d.creditsUsed, 0);
    assert.equal(d.creditsTotal, 1500);
    assert.equal(d.creditsUsagePct, 0);
    assert.deepEqual(d.cloudServices, {});
    assert.match(d.created, /^\d{4}-/);

    const read = await call('GET', `/api/admin/institution/${d._id}`, tok.adminB);
    assert.equal(read.statusCode, 200);
    assert.equal(read.json().data.name, 'Complete Campus');

    // usage numbers and the secret-free cloud services
    await updateInstitution(
      t.database.db,
      d._id,
      { creditsUsed: 500, cloudServices: { cloudprovider: { provider: 'gdrive', accessToken: 'enc:top-secret-access', refreshToken: 'enc:top-secret-refresh', expiresAt: '2027-01-01T00:00:00.000Z' } } },
      new Date(),
    );
    const again = await call('GET', `/api/admin/institution/${d._id}`, tok.root);
    const a = again.json().data;
    assert.equal(a.creditsTotal, 2000);
    assert.equal(a.creditsUsagePct, 25);
    assert.deepEqual(a.cloudServices, { cloudprovider: { provider: 'gdrive', connected: true, expiresAt: '2027-01-01T00:00:00.000Z' } });
    assert.ok(!again.body.includes('top-secret'));
    const listed = await call('GET', `/api/admin/institutions?search=complete`, tok.root);
    assert.ok(!listed.body.includes('top-secret'));

    // creditsUsagePct rounds to two decimals
    await updateInstitution(t.database.db, d._id, { credits: 2, creditsUsed: 1 }, new Date());
    assert.equal((await call('GET', `/api/admin/institution/${d._id}`, tok.root)).json().data.creditsUsagePct, 33.33);
  });

  test('institutions: account admin creates in its account only; institution admin cannot create or delete', async () => {
    const ok = await call('POST', '/api/admin/institution', tok.adminA, { account: w.accountA.id, name: 'Acme Chemistry', ainame: 'Curie' });
    assert.equal(ok.statusCode, 201);
    const d = ok.json().data;
    assert.equal(d.account, w.accountA.id);
    assert.equal(d.status, 'active');
    assert.equal(d.poolCredits, true);
    assert.equal(d.contactEmail, '');
    expectError(await call('POST', '/api/admin/institution', tok.adminA, { account: w.accountB.id, name: 'X', ainame: 'Y' }), 404, 'NOT_FOUND');
    expectError(await call('POST', '/api/admin/institution', tok.adminA, { account: newId(), name: 'X', ainame: 'Y' }), 404, 'NOT_FOUND');
    expectInvalid(await call('POST', '/api/admin/institution', tok.adminA, { account: 'no-such-account', name: 'X', ainame: 'Y' }), 'account');
    expectError(await call('POST', '/api/admin/institution', tok.instAdminA1, { account: w.accountA.id, name: 'X', ainame: 'Y' }), 403, 'FORBIDDEN');

    expectError(await call('DELETE', `/api/admin/institution/${d._id}`, tok.instAdminA1), 403, 'FORBIDDEN');
    const del = await call('DELETE', `/api/admin/institution/${d._id}`, tok.adminA);
    assert.equal(del.statusCode, 200);
    expectError(await call('GET', `/api/admin/institution/${d._id}`, tok.adminA), 404, 'NOT_FOUND');
  });

  test('institutions: institution admin reads and edits its own institution, not account-level fields, not siblings', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Acme Biology', ainame: 'Darwin' });
    const boss = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'admin', [w.a2.id]: 'user' } });
    const token = (await login(t.app, boss.email)).accessToken;

    assert.equal((await call('GET', `/api/admin/institution/${inst.id}`, token)).statusCode, 200);
    // a sibling of the same account: visible (same tenant) but not administered → 403
    expectError(await call('GET', `/api/admin/institution/${w.a1.id}`, token), 403, 'FORBIDDEN');
    expectError(await call('PATCH', `/api/admin/institution/${w.a2.id}`, token, { about: 'x' }), 403, 'FORBIDDEN');
    // another tenant → 404
    expectError(await call('GET', `/api/admin/institution/${w.b1.id}`, token), 404, 'NOT_FOUND');

    const edit = await call('PATCH', `/api/admin/institution/${inst.id}`, token, {
      about: 'Evolution, all of it',
      picture_bg: 'https://cdn.test/finches.png',
      invoices_urls: [],
      contactEmail: 'bio@acme.test',
      rtEnabled: true,
      credits: 999999,
      account: w.accountB.id,
    });
    assert.equal(edit.statusCode, 200, edit.body);
    const e = edit.json().data;
    assert.equal(e.about, 'Evolution, all of it');
    assert.equal(e.picture_bg, 'https://cdn.test/finches.png');
    assert.equal(e.contactEmail, 'bio@acme.test');
    assert.equal(e.rtEnabled, true);
    // credits and account are not editable here (ignored)
    assert.equal(e.credits, 0);
    assert.equal(e.account, w.accountA.id);

    for (const field of [{ status: 'inactive' }, { creditAward: 10 }, { poolCredits: false }, { maxFiles: 5 }, { maxCompletionTokens: 10 }, { conversationModel: 'x' }]) {
      expectError(await call('PATCH', `/api/admin/institution/${inst.id}`, token, field), 403, 'FORBIDDEN');
    }
    // sending the current value of a restricted field is not a change
    assert.equal((await call('PATCH', `/api/admin/institution/${inst.id}`, token, { status: 'active', about: 'same status' })).statusCode, 200);
    const byAccountAdmin = await call('PATCH', `/api/admin/institution/${inst.id}`, tok.adminA, { status: 'inactive', creditAward: 10, maxFiles: 5, summaryModel: null });
    assert.equal(byAccountAdmin.statusCode, 200);
    assert.equal(byAccountAdmin.json().data.status, 'inactive');
    assert.equal(byAccountAdmin.json().data.creditAward, 10);
    assert.equal(byAccountAdmin.json().data.summaryModel, null);
  });

  test('institutions: listing is scoped, filtered, paginated', async () => {
    const all = (await call('GET', '/api/admin/institutions?pageSize=5000', tok.root)).json();
    assert.equal(all.success, true);
    assert.ok(all.total >= 3);
    const onlyB = (await call('GET', `/api/admin/institutions?account=${w.accountB.id}&pageSize=5000`, tok.root)).json();
    assert.ok(onlyB.data.length > 0);
    assert.ok(onlyB.data.every((i: any) => i.account === w.accountB.id));
    const both = (await call('GET', `/api/admin/institutions?account=${encodeURIComponent(`${w.accountA.id} ${w.accountB.id}`)}&pageSize=5000`, tok.root)).json();
    assert.equal(both.total, all.data.filter((i: any) => i.account === w.accountA.id || i.account === w.accountB.id).length);

    const mine = (await call('GET', '/api/admin/institutions?pageSize=5000', tok.adminA)).json();
    assert.ok(mine.data.every((i: any) => i.account === w.accountA.id));
    assert.ok(mine.data.some((i: any) => i._id === w.a2.id));
    const instAdmin = (await call('GET', '/api/admin/institutions', tok.instAdminA1)).json();
    assert.deepEqual(instAdmin.data.map((i: any) => i._id), [w.a1.id]);

    const search = (await call('GET', '/api/admin/institutions?search=HERODOTUS', tok.root)).json();
    assert.ok(search.data.some((i: any) => i._id === w.a2.id));
    const page = (await call('GET', `/api/admin/institutions?account=${w.accountA.id}&pageSize=1&page=2`, tok.root)).json();
    assert.equal(page.page, 2);
    assert.equal(page.pageSize, 1);
    assert.equal(page.data.length, 1);
    assert.equal(page.hasMore, page.total > 2);

    expectInvalid(await call('GET', '/api/admin/institutions?pageSize=5001', tok.root), 'pageSize');
    expectInvalid(await call('GET', '/api/admin/institutions?page=0', tok.root), 'page');
    expectInvalid(await call('GET', '/api/admin/institutions?pageSize=abc', tok.root), 'pageSize');
  });

  test('institutions: validation 400s', async () => {
    const base = { account: w.accountA.id, name: 'V', ainame: 'V' };
    const post = (extra: object) => call('POST', '/api/admin/institution', tok.root, { ...base, ...extra });
    expectInvalid(await post({ status: 'paused' }), 'status');
    expectInvalid(await post({ contactEmail: 'nope' }), 'contactEmail');
    expectInvalid(await post({ maxFiles: -1 }), 'maxFiles');
    expectInvalid(await post({ maxFiles: 1.5 }), 'maxFiles');
    expectInvalid(await post({ maxCompletionTokens: '100' }), 'maxCompletionTokens');
    expectInvalid(await post({ credits: -5 }), 'credits');
    expectInvalid(await post({ creditAward: -1 }), 'creditAward');
    expectInvalid(await post({ picture: `https://x.test/${'a'.repeat(2100)}` }), 'picture');
    expectInvalid(await post({ ltiContextIds: [1] }), 'ltiContextIds.0');
    expectInvalid(await post({ toolsDisabled: Array.from({ length: 201 }, (_, i) => `t${i}`) }), 'toolsDisabled');
    expectInvalid(await post({ poolCredits: 'false' }), 'poolCredits');
    expectInvalid(await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, ainame: 'V' }), 'name');
    expectInvalid(await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.root, { status: 'closed' }), 'status');
    expectInvalid(await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.root, { name: '   ' }), 'name');
  });

  // ───────────── users ─────────────

  const newUserBody = (extra: Record<string, unknown> = {}) => ({
    email: `new-${Math.random().toString(36).slice(2, 10)}@acme.test`,
    password: 'a-long-password',
    fname: 'New',
    lname: 'Person',
    account: w.accountA.id,
    institutions: [{ institution: w.a1.id, role: 'user' }],
    ...extra,
  });

  test('users: account admin creates a user who can log in; duplicate e-mail is 409; no password hash anywhere', async () => {
    const body = newUserBody({ institutions: [{ institution: w.a1.id, role: 'user' }, { institution: w.a2.id, role: 'admin' }], timezone: 'Europe/Paris', location: 'Paris' });
    const res = await call('POST', '/api/admin/user', tok.adminA, body);
    assert.equal(res.statusCode, 201, res.body);
    const d = res.json().data;
    assert.equal(res.json().success, true);
    assert.equal(typeof d._id, 'string');
    assert.equal(d.email, body.email);
    assert.equal(d.account, w.accountA.id);
    assert.equal(d.role, 'user');
    assert.equal(d.timezone, 'Europe/Paris');
    assert.equal(d.institution, w.a1.id);
    assert.deepEqual(
      d.memberships.sort((x: any, y: any) => x.institution.localeCompare(y.institution)),
      [
        { institution: w.a1.id, role: 'user' },
        { institution: w.a2.id, role: 'admin' },
      ].sort((x, y) => x.institution.localeCompare(y.institution)),
    );
    assert.ok(!/password/i.test(res.body));
    await login(t.app, body.email.toUpperCase(), 'a-long-password');

    const dup = await call('POST', '/api/admin/user', tok.adminA, newUserBody({ email: body.email.toUpperCase() }));
    const dupBody = expectError(dup, 409, 'CONFLICT');
    assert.match(dupBody.message, /cannot be used/);

    const read = await call('GET', `/api/admin/user/${d._id}`, tok.adminA);
    assert.equal(read.statusCode, 200);
    assert.ok(!/password/i.test(read.body));
    const list = await call('GET', `/api/admin/users?search=${encodeURIComponent(body.email)}`, tok.adminA);
    assert.equal(list.json().total, 1);
    assert.ok(!/passwordHash|\$argon2/.test(list.body));
  });

  test('users: create scoping (roles, accounts, institutions)', async () => {
    expectError(await call('POST', '/api/admin/user', tok.adminA, newUserBody({ role: 'superadmin' })), 403, 'FORBIDDEN');
    assert.equal((await call('POST', '/api/admin/user', tok.adminA, newUserBody({ role: 'accountadmin' }))).statusCode, 201);
    expectError(await call('POST', '/api/admin/user', tok.adminA, newUserBody({ institutions: [{ institution: w.b1.id, role: 'user' }] })), 404, 'NOT_FOUND');
    expectError(await call('POST', '/api/admin/user', tok.adminA, newUserBody({ account: w.accountB.id, institutions: [] })), 404, 'NOT_FOUND');
    expectError(await call('POST', '/api/admin/user', tok.adminA, newUserBody({ institutions: [{ institution: newId(), role: 'user' }] })), 404, 'NOT_FOUND');
    expectInvalid(await call('POST', '/api/admin/user', tok.adminA, newUserBody({ institutions: [{ institution: 'missing', role: 'user' }] })), 'institutions.0.institution');
    expectInvalid(await call('POST', '/api/admin/user', tok.adminA, newUserBody({ account: 'not-an-id' })), 'account');
    expectInvalid(await call('POST', '/api/admin/user', tok.adminA, newUserBody({ institutions: [{ institution: w.a1.id, role: 'user' }, { institution: w.a1.id, role: 'admin' }] })), 'institutions');

    // institution admin of A1: only plain users enrolled in institutions it administers, in its account
    const ok = await call('POST', '/api/admin/user', tok.instAdminA1, newUserBody());
    assert.equal(ok.statusCode, 201, ok.body);
    expectError(await call('POST', '/api/admin/user', tok.instAdminA1, newUserBody({ institutions: [{ institution: w.a2.id, role: 'user' }] })), 403, 'FORBIDDEN');
    expectError(await call('POST', '/api/admin/user', tok.instAdminA1, newUserBody({ institutions: [] })), 403, 'FORBIDDEN');
    expectError(await call('POST', '/api/admin/user', tok.instAdminA1, newUserBody({ role: 'accountadmin' })), 403, 'FORBIDDEN');
    expectError(await call('POST', '/api/admin/user', tok.instAdminA1, newUserBody({ credits: 50 })), 403, 'FORBIDDEN');

    // superadmin: anything, including another account's institution, and initial credits
    const root = await call('POST', '/api/admin/user', tok.root, newUserBody({ account: w.accountB.id, institutions: [{ institution: w.b1.id, role: 'admin' }], credits: 70, role: 'accountadmin' }));
    assert.equal(root.statusCode, 201);
    assert.equal(root.json().data.credits, 70);
    assert.equal(root.json().data.role, 'accountadmin');
    // an admin who can see an institution of another account (it is enrolled there) still cannot put it on a user of this account
    const straddler = await makeUser(t.database, { accountId: w.accountA.id, role: 'accountadmin', memberships: { [w.b1.id]: 'user' } });
    const straddlerToken = (await login(t.app, straddler.email)).accessToken;
    expectInvalid(await call('POST', '/api/admin/user', straddlerToken, newUserBody({ institutions: [{ institution: w.b1.id, role: 'user' }] })), 'institutions');
  });

  test('users: validation 400s', async () => {
    expectInvalid(await call('POST', '/api/admin/user', tok.root, newUserBody({ password: 'short' })), 'password');
    expectInvalid(await call('POST', '/api/admin/user', tok.root, newUserBody({ email: 'not-an-email' })), 'email');
    expectInvalid(await call('POST', '/api/admin/user', tok.root, newUserBody({ institutions: [{ institution: w.a1.id, role: 'owner' }] })), 'institutions.0.role');
    expectInvalid(await call('POST', '/api/admin/user', tok.root, newUserBody({ credits: -1 })), 'credits');
    expectInvalid(await call('POST', '/api/admin/user', tok.root, newUserBody({ role: 'god' })), 'role');
    expectInvalid(await call('POST', '/api/admin/user', tok.root, newUserBody({ timezone: 'Mars/Olympus' })), 'timezone');
    expectInvalid(await call('POST', '/api/admin/user', tok.root, { ...newUserBody(), institutions: undefined }), 'institutions');
    expectInvalid(await call('PATCH', `/api/admin/user/${w.userA2.id}`, tok.root, { status: 'banned' }), 'status');
    expectInvalid(await call('PATCH', `/api/admin/user/${w.userA2.id}`, tok.root, { fname: 12 }), 'fname');
    expectInvalid(await call('PATCH', `/api/admin/user/${w.userA2.id}`, tok.root, { password: 'short' }), 'password');
    expectInvalid(await call('GET', '/api/admin/users?pageSize=5001', tok.root), 'pageSize');
  });

  test('users: read, edit, disable (sessions end), password reset, delete, with scoping', async () => {
    const target = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const targetToken = (await login(t.app, target.email)).accessToken;

    // institution admin of A1 reads/edits members of A1, not members of A2 only
    assert.equal((await call('GET', `/api/admin/user/${target.id}`, tok.instAdminA1)).statusCode, 200);
    expectError(await call('GET', `/api/admin/user/${w.userA2.id}`, tok.instAdminA1), 403, 'FORBIDDEN');
    expectError(await call('PATCH', `/api/admin/user/${w.userA2.id}`, tok.instAdminA1, { fname: 'X' }), 403, 'FORBIDDEN');
    const renamed = await call('PATCH', `/api/admin/user/${target.id}`, tok.instAdminA1, { fname: ' Renamed ', location: 'Lyon', timezone: 'Europe/Paris' });
    assert.equal(renamed.statusCode, 200);
    assert.equal(renamed.json().data.fname, 'Renamed');
    assert.equal(renamed.json().data.timezone, 'Europe/Paris');
    expectError(await call('PATCH', `/api/admin/user/${target.id}`, tok.instAdminA1, { role: 'accountadmin' }), 403, 'FORBIDDEN');
    // the account admin of A is a member of A1 too, but an institution admin cannot change an account admin
    expectError(await call('PATCH', `/api/admin/user/${w.accountAdminA.id}`, tok.instAdminA1, { fname: 'X' }), 403, 'FORBIDDEN');
    expectError(await call('DELETE', `/api/admin/user/${target.id}`, tok.instAdminA1), 403, 'FORBIDDEN');
    expectError(await call('PATCH', `/api/admin/user/${target.id}`, tok.instAdminA1, { timezone: 'Nowhere/Land' }), 400, 'VALIDATION_FAILED');

    // account admin: cannot touch the superadmin (who lives in account A) and cannot grant superadmin
    assert.equal((await call('GET', `/api/admin/user/${w.superadmin.id}`, tok.adminA)).statusCode, 200);
    expectError(await call('PATCH', `/api/admin/user/${w.superadmin.id}`, tok.adminA, { password: 'taken-over-now' }), 403, 'FORBIDDEN');
    expectError(await call('PATCH', `/api/admin/user/${target.id}`, tok.adminA, { role: 'superadmin' }), 403, 'FORBIDDEN');
    const promoted = await call('PATCH', `/api/admin/user/${target.id}`, tok.adminA, { role: 'accountadmin' });
    assert.equal(promoted.json().data.role, 'accountadmin');
    assert.equal((await call('PATCH', `/api/admin/user/${target.id}`, tok.adminA, { role: 'user' })).json().data.role, 'user');

    // disabling ends the sessions at once
    assert.equal((await call('GET', '/api/user/me', targetToken)).statusCode, 200);
    const disabled = await call('PATCH', `/api/admin/user/${target.id}`, tok.adminA, { status: 'disabled' });
    assert.equal(disabled.statusCode, 200);
    assert.equal(disabled.json().data.status, 'disabled');
    assert.equal((await call('GET', '/api/user/me', targetToken)).statusCode, 401);
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: target.email, password: PASSWORD } })).statusCode, 403);

    // re-enable and reset the password: old sessions end, the new password works
    await call('PATCH', `/api/admin/user/${target.id}`, tok.adminA, { status: 'active' });
    const session = (await login(t.app, target.email)).accessToken;
    assert.equal((await call('PATCH', `/api/admin/user/${target.id}`, tok.adminA, { password: 'brand-new-password' })).statusCode, 200);
    assert.equal((await call('GET', '/api/user/me', session)).statusCode, 401);
    await login(t.app, target.email, 'brand-new-password');

    // delete
    expectError(await call('DELETE', `/api/admin/user/${w.accountAdminA.id}`, tok.adminA), 403, 'FORBIDDEN');
    const del = await call('DELETE', `/api/admin/user/${target.id}`, tok.adminA);
    assert.equal(del.statusCode, 200);
    expectError(await call('GET', `/api/admin/user/${target.id}`, tok.adminA), 404, 'NOT_FOUND');
  });

  test('users: listing is scoped and filtered', async () => {
    const scoped = (await call('GET', '/api/admin/users?pageSize=5000', tok.adminA)).json();
    assert.equal(scoped.success, true);
    assert.ok(scoped.data.every((u: any) => u.account === w.accountA.id));
    assert.ok(scoped.data.some((u: any) => u._id === w.userA2.id));
    assert.ok(!scoped.data.some((u: any) => u._id === w.userB1.id));

    const instAdmin = (await call('GET', '/api/admin/users?pageSize=5000', tok.instAdminA1)).json();
    assert.ok(instAdmin.data.length > 0);
    assert.ok(instAdmin.data.every((u: any) => u.memberships.some((m: any) => m.institution === w.a1.id)));
    assert.ok(!instAdmin.data.some((u: any) => u._id === w.userA2.id));

    const inA2 = (await call('GET', `/api/admin/users?institution=${w.a2.id}&pageSize=5000`, tok.root)).json();
    assert.ok(inA2.data.some((u: any) => u._id === w.userA2.id));
    assert.ok(inA2.data.every((u: any) => u.memberships.some((m: any) => m.institution === w.a2.id)));

    const special = await makeUser(t.database, { accountId: w.accountA.id, email: 'under_score@acme.test', memberships: { [w.a1.id]: 'user' } });
    await makeUser(t.database, { accountId: w.accountA.id, email: 'underXscore@acme.test', memberships: { [w.a1.id]: 'user' } });
    const lit = (await call('GET', `/api/admin/users?search=${encodeURIComponent('R_S')}`, tok.adminA)).json();
    assert.deepEqual(lit.data.map((u: any) => u._id), [special.id]);

    const p = (await call('GET', `/api/admin/users?account=${w.accountA.id}&pageSize=2&page=1`, tok.root)).json();
    assert.equal(p.data.length, 2);
    assert.equal(p.hasMore, p.total > 2);
  });

  // ───────────── memberships ─────────────

  test('memberships: 201 new, 200 role changed, delete 200 then 404; scoping', async () => {
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a2.id]: 'user' } });
    const first = await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: w.a1.id, role: 'user' });
    assert.equal(first.statusCode, 201);
    assert.deepEqual(first.json().data, { user: u.id, institution: w.a1.id, role: 'user', created: true });
    const changed = await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: w.a1.id, role: 'admin' });
    assert.equal(changed.statusCode, 200);
    assert.equal(changed.json().message, 'Role changed');
    const read = (await call('GET', `/api/admin/user/${u.id}`, tok.adminA)).json().data;
    assert.deepEqual(read.memberships.find((m: any) => m.institution === w.a1.id), { institution: w.a1.id, role: 'admin' });

    // institution admin of A1: may not demote a fellow admin of A1 (only account admins may); the account admin may
    expectError(await call('POST', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a1.id, role: 'user' }), 403, 'FORBIDDEN');
    expectError(await call('DELETE', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a1.id }), 403, 'FORBIDDEN');
    assert.equal((await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: w.a1.id, role: 'user' })).statusCode, 200);
    // ... and manages the plain enrolments of its institution for plain users of its account
    const same = await call('POST', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a1.id, role: 'user' });
    assert.equal(same.statusCode, 200);
    assert.equal(same.json().message, 'Unchanged');
    expectError(await call('POST', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a2.id, role: 'admin' }), 403, 'FORBIDDEN');
    expectError(await call('POST', '/api/admin/membership', tok.instAdminA1, { user: w.accountAdminA.id, institution: w.a1.id, role: 'user' }), 403, 'FORBIDDEN');
    // users of another tenant: not visible → 404
    expectError(await call('POST', '/api/admin/membership', tok.instAdminA1, { user: w.userB1.id, institution: w.a1.id, role: 'user' }), 404, 'NOT_FOUND');
    // a user of account B enrolled in A1 by the superadmin is visible to the A1 admin, who cannot raise them ...
    const crossed = await makeUser(t.database, { accountId: w.accountB.id, memberships: { [w.b1.id]: 'user' } });
    assert.equal((await call('POST', '/api/admin/membership', tok.root, { user: crossed.id, institution: w.a1.id, role: 'user' })).statusCode, 201);
    expectError(await call('POST', '/api/admin/membership', tok.instAdminA1, { user: crossed.id, institution: w.a1.id, role: 'admin' }), 403, 'FORBIDDEN');
    expectError(await call('POST', '/api/admin/membership', tok.adminA, { user: crossed.id, institution: w.a1.id, role: 'admin' }), 403, 'FORBIDDEN');
    // ... and the account admin of B does not see A1 in that user's record
    const seenByB = (await call('GET', `/api/admin/user/${crossed.id}`, tok.adminB)).json().data;
    assert.deepEqual(seenByB.memberships, [{ institution: w.b1.id, role: 'user' }]);
    // ... but may end their plain enrolment in its own institution (an outsider is kept out, not let in); gone from A1,
    // the user is out of its sight again (404), and cannot be enrolled back
    assert.equal((await call('DELETE', '/api/admin/membership', tok.instAdminA1, { user: crossed.id, institution: w.a1.id })).statusCode, 200);
    expectError(await call('POST', '/api/admin/membership', tok.instAdminA1, { user: crossed.id, institution: w.a1.id, role: 'user' }), 404, 'NOT_FOUND');

    const removed = await call('DELETE', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a1.id });
    assert.equal(removed.statusCode, 200);
    expectError(await call('DELETE', '/api/admin/membership', tok.adminA, { user: u.id, institution: w.a1.id }), 404, 'NOT_FOUND');
    expectError(await call('DELETE', '/api/admin/membership', tok.adminA, { user: newId(), institution: w.a1.id }), 404, 'NOT_FOUND');
    expectInvalid(await call('DELETE', '/api/admin/membership', tok.adminA, { user: 'nobody', institution: w.a1.id }), 'user');
    expectInvalid(await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: 'nowhere', role: 'user' }), 'institution');

    expectInvalid(await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: w.a1.id, role: 'owner' }), 'role');
    expectInvalid(await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: w.a1.id }), 'role');
    expectInvalid(await call('DELETE', '/api/admin/membership', tok.adminA, { user: u.id }), 'institution');
  });

  // ───────────── reach: taking over a user never yields a role the caller could not grant ─────────────

  test('reach: enrolling an admin of another institution gives the enrolling institution admin no power over them', async () => {
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a2.id]: 'admin' } });
    // enrolling them as a member of A1 is allowed (and makes them visible) ...
    const enrolled = await call('POST', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a1.id, role: 'user' });
    assert.equal(enrolled.statusCode, 201, enrolled.body);
    assert.equal((await call('GET', `/api/admin/user/${u.id}`, tok.instAdminA1)).statusCode, 200);
    // ... but gives no hold on them: no password, status or profile change, no admin role
    const before = await findUserById(t.database.db, u.id);
    for (const patch of [{ password: 'taken-over-password' }, { status: 'disabled' }, { fname: 'Owned' }, { timezone: 'Europe/Paris' }]) {
      expectError(await call('PATCH', `/api/admin/user/${u.id}`, tok.instAdminA1, patch), 403, 'FORBIDDEN');
    }
    expectError(await call('POST', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a1.id, role: 'admin' }), 403, 'FORBIDDEN');
    const after = await findUserById(t.database.db, u.id);
    assert.equal(after?.passwordHash, before?.passwordHash);
    assert.equal(after?.status, 'active');
    assert.equal(after?.fname, before?.fname);
    assert.equal(after?.timezone, before?.timezone);
    // end to end: the attacker's password does not log in; U logs in with their own and still runs A2
    const stolen = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: u.email, password: 'taken-over-password' } });
    assert.equal(stolen.statusCode, 401);
    const uToken = (await login(t.app, u.email)).accessToken;
    assert.equal((await call('PATCH', `/api/admin/institution/${w.a2.id}`, uToken, { about: 'still run by its admin' })).statusCode, 200);
    // the A1 admin may still end the enrolment in its own institution
    assert.equal((await call('DELETE', '/api/admin/membership', tok.instAdminA1, { user: u.id, institution: w.a1.id })).statusCode, 200);
    // the account admin of A has power over U: every enrolment of U is in account A
    assert.equal((await call('PATCH', `/api/admin/user/${u.id}`, tok.adminA, { password: 'reset-by-account-admin' })).statusCode, 200);
    await login(t.app, u.email, 'reset-by-account-admin');
  });

  test('reach: a user enrolled in another account is out of reach of the admins of their home account', async () => {
    // home account A; plain member of A1; admin (resp. member) of B1 in account B
    const adminAbroad = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.b1.id]: 'admin' } });
    const memberAbroad = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.b1.id]: 'user' } });
    // an account admin of B enrolled nowhere: its rights come from the account alone
    const adminBOnly = (await login(t.app, (await makeUser(t.database, { accountId: w.accountB.id, role: 'accountadmin' })).email)).accessToken;
    for (const target of [adminAbroad, memberAbroad]) {
      const before = await findUserById(t.database.db, target.id);
      for (const token of [tok.instAdminA1, tok.adminA, tok.adminB]) {
        expectError(await call('PATCH', `/api/admin/user/${target.id}`, token, { password: 'taken-over-password' }), 403, 'FORBIDDEN');
        expectError(await call('PATCH', `/api/admin/user/${target.id}`, token, { status: 'disabled' }), 403, 'FORBIDDEN');
        expectError(await call('PATCH', `/api/admin/user/${target.id}`, token, { fname: 'Owned' }), 403, 'FORBIDDEN');
      }
      expectError(await call('PATCH', `/api/admin/user/${target.id}`, tok.adminA, { role: 'accountadmin' }), 403, 'FORBIDDEN');
      expectError(await call('POST', `/api/admin/user/${target.id}/credits`, tok.adminA, { amount: 5 }), 403, 'FORBIDDEN');
      expectError(await call('DELETE', `/api/admin/user/${target.id}`, tok.adminA), 403, 'FORBIDDEN');
      // still readable by the admins of their home account, and by the account admin of the account they are enrolled in
      assert.equal((await call('GET', `/api/admin/user/${target.id}`, tok.adminA)).statusCode, 200);
      assert.equal((await call('GET', `/api/admin/user/${target.id}`, tok.instAdminA1)).statusCode, 200);
      assert.equal((await call('GET', `/api/admin/user/${target.id}`, adminBOnly)).statusCode, 200);
      const after = await findUserById(t.database.db, target.id);
      assert.deepEqual(
        { hash: after?.passwordHash, status: after?.status, fname: after?.fname, role: after?.role, credits: Number(after?.credits) },
        { hash: before?.passwordHash, status: before?.status, fname: before?.fname, role: before?.role, credits: Number(before?.credits) },
      );
    }
    // the admin of B1 still logs in with their own password and runs B1
    const xToken = (await login(t.app, adminAbroad.email)).accessToken;
    assert.equal((await call('PATCH', `/api/admin/institution/${w.b1.id}`, xToken, { about: 'still run by its admin' })).statusCode, 200);
    // the superadmin reaches everyone
    assert.equal((await call('PATCH', `/api/admin/user/${adminAbroad.id}`, tok.root, { password: 'reset-by-superadmin' })).statusCode, 200);
    await login(t.app, adminAbroad.email, 'reset-by-superadmin');
  });

  test('reach: legitimate changes still work', async () => {
    // an institution admin changes plain users whose every enrolment is a user enrolment in institutions it administers
    const only = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    assert.equal((await call('PATCH', `/api/admin/user/${only.id}`, tok.instAdminA1, { password: 'a1-admin-set-pass', fname: 'Only' })).statusCode, 200);
    await login(t.app, only.email, 'a1-admin-set-pass');
    assert.equal((await call('PATCH', `/api/admin/user/${only.id}`, tok.instAdminA1, { status: 'disabled' })).json().data.status, 'disabled');
    assert.equal((await call('PATCH', `/api/admin/user/${only.id}`, tok.instAdminA1, { status: 'active' })).json().data.status, 'active');

    const boss = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'admin', [w.a2.id]: 'admin' } });
    const bossToken = (await login(t.app, boss.email)).accessToken;
    const both = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    expectError(await call('PATCH', `/api/admin/user/${both.id}`, tok.instAdminA1, { password: 'a1-admin-set-pass' }), 403, 'FORBIDDEN');
    assert.equal((await call('PATCH', `/api/admin/user/${both.id}`, bossToken, { password: 'boss-set-password' })).statusCode, 200);
    await login(t.app, both.email, 'boss-set-password');

    // a user it created is within its reach
    const created = (await call('POST', '/api/admin/user', tok.instAdminA1, newUserBody())).json().data;
    assert.equal((await call('PATCH', `/api/admin/user/${created._id}`, tok.instAdminA1, { lname: 'Changed' })).json().data.lname, 'Changed');

    // it may make a member within its reach an admin of its institution; from then on only account admins change them
    assert.equal((await call('POST', '/api/admin/membership', tok.instAdminA1, { user: only.id, institution: w.a1.id, role: 'admin' })).statusCode, 200);
    expectError(await call('PATCH', `/api/admin/user/${only.id}`, tok.instAdminA1, { fname: 'X' }), 403, 'FORBIDDEN');
    // a brand-new enrolment as admin, of a user within reach, works too
    const fresh = await makeUser(t.database, { accountId: w.accountA.id });
    assert.equal((await call('POST', '/api/admin/membership', bossToken, { user: fresh.id, institution: w.a2.id, role: 'user' })).statusCode, 201);
    assert.equal((await call('POST', '/api/admin/membership', bossToken, { user: fresh.id, institution: w.a1.id, role: 'admin' })).statusCode, 201);

    // the account admin: users of its account enrolled only there, institution admins included
    assert.equal((await call('PATCH', `/api/admin/user/${boss.id}`, tok.adminA, { password: 'account-admin-set' })).statusCode, 200);
    await login(t.app, boss.email, 'account-admin-set');
    assert.equal((await call('PATCH', `/api/admin/user/${only.id}`, tok.adminA, { role: 'accountadmin' })).json().data.role, 'accountadmin');
    // credits: it cannot mint (403) but moves credits of its account to the user
    expectError(await call('POST', `/api/admin/user/${only.id}/credits`, tok.adminA, { amount: 1 }), 403, 'FORBIDDEN');
    assert.equal((await call('POST', `/api/admin/institution/${w.a2.id}/credits`, tok.root, { amount: 1 })).statusCode, 200);
    const moved = await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: w.a2.id }, to: { user: only.id }, amount: 1 });
    assert.equal(moved.statusCode, 200, moved.body);
    // and it still manages the enrolments of its institutions, for users enrolled abroad too
    const abroad = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.b1.id]: 'admin' } });
    assert.equal((await call('POST', '/api/admin/membership', tok.adminA, { user: abroad.id, institution: w.a2.id, role: 'admin' })).statusCode, 201);
    assert.equal((await call('DELETE', '/api/admin/membership', tok.adminA, { user: abroad.id, institution: w.a2.id })).statusCode, 200);
  });

  test('credits: values with more than 4 decimals are refused (400), never rounded', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { credits: 1 });
    // large values too: 123456789.00000004 is another double than 123456789, and numeric(20,4) would round it
    for (const amount of [0.00005, 0.00015, 1.23456, -0.00005, 999999999.99995, 123456789.00000004, 100000000.00000001, 0.1 + 0.2]) {
      expectInvalid(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount }), 'amount');
    }
    assert.equal(Number((await findInstitution(t.database.db, inst.id))?.credits), 1);
    for (const amount of [0.0001, 0.0003, 123456.7891, -0.0004]) {
      const res = await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount });
      assert.equal(res.statusCode, 200, `${amount}: ${res.body}`);
    }
    assert.equal(Number((await findInstitution(t.database.db, inst.id))?.credits), 123457.7891);

    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    expectInvalid(await call('POST', `/api/admin/user/${u.id}/credits`, tok.root, { amount: 2.00005 }), 'amount');
    assert.equal(Number((await findUserById(t.database.db, u.id))?.credits), 0);
    assert.equal((await call('POST', `/api/admin/user/${u.id}/credits`, tok.root, { amount: 2.0005 })).json().data.credits, 2.0005);

    // opening balances and awards, on create and patch
    const post = (extra: object) => call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Precise Campus', ainame: 'P', ...extra });
    expectInvalid(await post({ credits: 10.00005 }), 'credits');
    expectInvalid(await post({ creditAward: 0.12345 }), 'creditAward');
    assert.equal((await call('GET', '/api/admin/institutions?search=precise', tok.root)).json().total, 0);
    const precise = await post({ credits: 10.0001, creditAward: 0.1234 });
    assert.equal(precise.statusCode, 201, precise.body);
    assert.equal(precise.json().data.credits, 10.0001);
    assert.equal(precise.json().data.creditAward, 0.1234);
    const id = precise.json().data._id;
    expectInvalid(await call('PATCH', `/api/admin/institution/${id}`, tok.root, { creditAward: 1.00001 }), 'creditAward');
    assert.equal(Number((await findInstitution(t.database.db, id))?.creditAward), 0.1234);
    assert.equal((await call('PATCH', `/api/admin/institution/${id}`, tok.root, { creditAward: 1.0001 })).json().data.creditAward, 1.0001);

    expectInvalid(await call('POST', '/api/admin/user', tok.root, newUserBody({ credits: 5.55555 })), 'credits');
    const rich = await call('POST', '/api/admin/user', tok.root, newUserBody({ credits: 5.5555 }));
    assert.equal(rich.statusCode, 201, rich.body);
    assert.equal(rich.json().data.credits, 5.5555);
  });

  test('a new member of an institution with poolCredits false receives creditAward exactly once, from the institution', async () => {
    const inst = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Own Wallets', ainame: 'W', poolCredits: false, creditAward: 250, credits: 10_000 })).json().data;
    const pooled = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Pooled', ainame: 'P', poolCredits: true, creditAward: 999, credits: 10_000 })).json().data;

    // on creation through the admin user route: opening balance (a superadmin's) + award
    const created = await call('POST', '/api/admin/user', tok.root, newUserBody({ credits: 10, institutions: [{ institution: inst._id, role: 'user' }, { institution: pooled._id, role: 'user' }] }));
    assert.equal(created.statusCode, 201);
    assert.equal(created.json().data.credits, 260);
    assert.equal(Number((await findInstitution(t.database.db, inst._id))?.credits), 10_000 - 250);
    assert.equal(Number((await findInstitution(t.database.db, pooled._id))?.credits), 10_000);

    // through the membership route, with 10 concurrent enrolments of the same user
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a2.id]: 'user' } });
    const results = await Promise.all(
      Array.from({ length: 10 }, () => call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: inst._id, role: 'user' })),
    );
    assert.equal(results.filter((r) => r.statusCode === 201).length, 1);
    assert.equal(results.filter((r) => r.statusCode === 200).length, 9);
    assert.equal(Number((await findUserById(t.database.db, u.id))?.credits), 250);
    // role changes and pooled institutions award nothing
    await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: inst._id, role: 'admin' });
    await call('POST', '/api/admin/membership', tok.adminA, { user: u.id, institution: pooled._id, role: 'user' });
    assert.equal(Number((await findUserById(t.database.db, u.id))?.credits), 250);
    assert.equal(Number((await findInstitution(t.database.db, inst._id))?.credits), 10_000 - 500);
  });

  // ───────────── credits ─────────────

  test('institution credits: top-up, correction, permissions, validation', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { credits: 100 });
    // minting is a superadmin's act: the account admin gets 403 and nothing changes
    expectError(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.adminA, { amount: 50.5 }), 403, 'FORBIDDEN');
    assert.equal(Number((await findInstitution(t.database.db, inst.id))?.credits), 100);
    const up = await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: 50.5 });
    assert.equal(up.statusCode, 200);
    assert.deepEqual(up.json(), { success: true, data: { _id: inst.id, credits: 150.5 } });
    const down = await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: -0.5 });
    assert.deepEqual(down.json().data, { _id: inst.id, credits: 150 });

    const tooMuch = await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: -150.0001 });
    const body = expectError(tooMuch, 400, 'VALIDATION_FAILED');
    assert.equal(body.error.details[0].field, 'amount');
    assert.equal(Number((await findInstitution(t.database.db, inst.id))?.credits), 150);
    assert.equal((await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: -150 })).json().data.credits, 0);

    expectError(await call('POST', `/api/admin/institution/${w.a1.id}/credits`, tok.instAdminA1, { amount: 10 }), 403, 'FORBIDDEN');
    expectError(await call('POST', `/api/admin/institution/${newId()}/credits`, tok.root, { amount: 10 }), 404, 'NOT_FOUND');
    expectInvalid(await call('POST', `/api/admin/institution/missing/credits`, tok.root, { amount: 10 }), 'id');
    expectInvalid(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: 0 }), 'amount');
    expectInvalid(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: 0.00001 }), 'amount');
    expectInvalid(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: 1e9 + 1 }), 'amount');
    expectInvalid(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: -1e9 - 1 }), 'amount');
    expectInvalid(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: '5' }), 'amount');
    expectInvalid(await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, {}), 'amount');
    assert.equal(Number((await findInstitution(t.database.db, inst.id))?.credits), 0);
  });

  test('institution credits: 50 concurrent +/− changes add up exactly; concurrent debits never overdraw', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { credits: 1000 });
    const amounts = Array.from({ length: 50 }, (_, i) => (i % 5 < 3 ? 3 : -2)); // 30 × +3, 20 × −2
    const res = await Promise.all(amounts.map((amount) => call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount })));
    assert.ok(res.every((r) => r.statusCode === 200));
    assert.equal(Number((await findInstitution(t.database.db, inst.id))?.credits), 1000 + 30 * 3 - 20 * 2);

    const small = await makeInstitution(t.database, w.accountA.id, { credits: 10 });
    const debits = await Promise.all(Array.from({ length: 30 }, () => call('POST', `/api/admin/institution/${small.id}/credits`, tok.root, { amount: -1 })));
    assert.equal(debits.filter((r) => r.statusCode === 200).length, 10);
    assert.equal(debits.filter((r) => r.statusCode === 400).length, 20);
    assert.equal(Number((await findInstitution(t.database.db, small.id))?.credits), 0);
  });

  test('user credits: top-up, concurrency, overdraw refused, scoping', async () => {
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const res = await Promise.all(
      Array.from({ length: 50 }, (_, i) => call('POST', `/api/admin/user/${u.id}/credits`, tok.root, { amount: i % 2 === 0 ? 2 : -1 })),
    );
    // the first request may be a −1 on an empty balance: only successful ones count
    const applied = res.reduce((sum, r, i) => (r.statusCode === 200 ? sum + (i % 2 === 0 ? 2 : -1) : sum), 0);
    assert.ok(res.every((r) => r.statusCode === 200 || r.statusCode === 400));
    assert.equal(Number((await findUserById(t.database.db, u.id))?.credits), applied);
    assert.ok(applied >= 25);

    const before = Number((await findUserById(t.database.db, u.id))?.credits);
    const over = await call('POST', `/api/admin/user/${u.id}/credits`, tok.root, { amount: -(before + 1) });
    expectError(over, 400, 'VALIDATION_FAILED');
    assert.equal(Number((await findUserById(t.database.db, u.id))?.credits), before);
    const ok = await call('POST', `/api/admin/user/${u.id}/credits`, tok.root, { amount: 5 });
    assert.deepEqual(ok.json(), { success: true, data: { _id: u.id, credits: before + 5 } });

    expectError(await call('POST', `/api/admin/user/${u.id}/credits`, tok.instAdminA1, { amount: 5 }), 403, 'FORBIDDEN');
    expectError(await call('POST', `/api/admin/user/${w.superadmin.id}/credits`, tok.adminA, { amount: 5 }), 403, 'FORBIDDEN');
    expectError(await call('POST', `/api/admin/user/${u.id}/credits`, tok.adminA, { amount: 5 }), 403, 'FORBIDDEN');
    expectInvalid(await call('POST', `/api/admin/user/${u.id}/credits`, tok.root, { amount: 0 }), 'amount');
  });

  test('deleting an institution or a user keeps the ledger: their rows stay with the account, and a closing row takes off their balance', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id);
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    assert.equal((await call('POST', `/api/admin/institution/${inst.id}/credits`, tok.root, { amount: 100 })).statusCode, 200);
    const moved = await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: inst.id }, to: { user: member.id }, amount: 40 });
    assert.equal(moved.statusCode, 200, moved.body);
    const books = async () =>
      (
        await rowsOf<{ ledger: string; held: string }>(
          t.database.db,
          sql`select (select coalesce(sum(delta), 0) from credit_ledger where account_id = ${w.accountA.id})::text as ledger,
                     ((select coalesce(sum(credits), 0) from institutions where account_id = ${w.accountA.id})
                      + (select coalesce(sum(credits), 0) from users where account_id = ${w.accountA.id}))::text as held`,
        )
      )[0]!;
    // other tests of this file set balances by SQL, outside the ledger: what must hold is that deleting
    // holders changes the ledger exactly as it changes the balances the account holds
    const before = await books();

    assert.equal((await call('DELETE', `/api/admin/institution/${inst.id}`, tok.adminA)).statusCode, 200);
    assert.equal((await call('DELETE', `/api/admin/user/${member.id}`, tok.adminA)).statusCode, 200);
    const kept = await rowsOf<{ kind: string; delta: string; ref_id: string | null; holder: string | null }>(
      t.database.db,
      sql`select kind, delta::text as delta, ref_id, coalesce(user_id, institution_id) as holder from credit_ledger
           where ref_id in (${moved.json().data.refId}, ${inst.id}, ${member.id}) or (kind = 'topup' and delta = 100 and account_id = ${w.accountA.id} and institution_id is null)
           order by kind, credit_ledger.delta`,
    );
    assert.deepEqual(
      kept.map((r) => [r.kind, Number(r.delta), r.holder]),
      [
        ['closed', -60, null],
        ['closed', -40, null],
        ['topup', 100, null],
        ['transfer_in', 40, null],
        ['transfer_out', -40, null],
      ],
    );
    assert.deepEqual(kept.filter((r) => r.kind === 'closed').map((r) => r.ref_id).sort(), [inst.id, member.id].sort());
    const after = await books();
    const gap = (b: { ledger: string; held: string }) => Math.round((Number(b.held) - Number(b.ledger)) * 10_000);
    assert.equal(Math.round(Number(after.held) * 10_000), Math.round((Number(before.held) - 100) * 10_000), 'the 60 and the 40 left with their holders');
    assert.equal(gap(after), gap(before), 'the ledger moved with the balances the account holds');
  });

  test("deleting a user deletes the assistants they own (private, shared, personal): none becomes a system assistant; others' records keep their turn without the assistant", async () => {
    const owner = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const peer = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const ownerTok = (await login(t.app, owner.email)).accessToken;
    const peerTok = (await login(t.app, peer.email)).accessToken;
    const create = async (token: string, body: Record<string, unknown>) => {
      const res = await call('POST', '/api/user/assistant', token, body);
      assert.equal(res.statusCode, 201, res.body);
      return res.json().data._id as string;
    };
    const priv = await create(ownerTok, { name: 'Owner private coach', instructions: 'PRIVATE: my medical history', institution: w.a1.id });
    const shared = await create(ownerTok, { name: 'Owner shared tutor', institution: w.a1.id, institution_shared: true });
    const personal = await create(ownerTok, { name: 'Owner personal notes', institution: null });
    const system = await create(tok.instAdminA1, { name: 'A1 system helper', institution: w.a1.id, system: true });
    const owned = [priv, shared, personal];

    // a record of the peer made with the owner's shared assistant, with a thumb (so the feedbacks listing shows it)
    const recordId = newId();
    await t.database.db.insert(schema.histories).values({
      id: recordId, userId: peer.id, accountId: w.accountA.id, institutionId: w.a1.id, assistantId: shared,
      success: true, input: 'asked the shared tutor', inputs: ['asked the shared tutor'], outputs: ['answer'], thumbUpDown: 'up',
    });

    assert.equal((await call('GET', `/api/user/assistant/${priv}`, peerTok)).statusCode, 404, 'private before the deletion');
    assert.equal((await call('GET', `/api/user/assistant/${shared}`, peerTok)).statusCode, 200);

    assert.equal((await call('DELETE', `/api/admin/user/${owner.id}`, tok.adminA)).statusCode, 200);

    for (const id of owned) expectError(await call('GET', `/api/user/assistant/${id}`, peerTok), 404, 'NOT_FOUND');
    const sys = await call('GET', `/api/user/assistant/${system}`, peerTok);
    assert.equal(sys.statusCode, 200, 'a genuine system assistant is still visible to members');
    assert.equal(sys.json().data.owner, null);

    const listed = await call('GET', '/api/user/assistants', peerTok);
    assert.equal(listed.statusCode, 200, listed.body);
    const listedIds = listed.json().data.map((a: any) => a._id);
    assert.ok(listedIds.includes(system));
    assert.deepEqual(owned.filter((id) => listedIds.includes(id)), []);

    for (const token of [tok.adminA, tok.root]) {
      const sysOnly = await call('POST', '/api/admin/assistants', token, { system_only: true, pageSize: 5000 });
      assert.equal(sysOnly.statusCode, 200, sysOnly.body);
      const ids = sysOnly.json().data.map((a: any) => a._id);
      assert.ok(ids.includes(system));
      assert.deepEqual(owned.filter((id) => ids.includes(id)), [], 'none of the deleted user\'s assistants is listed as a system assistant');
      const all = (await call('POST', '/api/admin/assistants', token, { pageSize: 5000 })).json().data.map((a: any) => a._id);
      assert.deepEqual(owned.filter((id) => all.includes(id)), []);
    }
    const left = await rowsOf<{ id: string }>(t.database.db, sql`select id from assistants where id in (${priv}, ${shared}, ${personal})`);
    assert.deepEqual(left, [], 'the personal assistant (no institution) went too');

    // the peer's record stays, without the assistant, in its listing and in the admin feedbacks
    const mine = await call('POST', '/api/user/histories', peerTok, { institution: w.a1.id });
    assert.equal(mine.statusCode, 200, mine.body);
    const rec = mine.json().data.find((h: any) => h.id === recordId);
    assert.ok(rec, 'the record is still listed');
    assert.equal(rec.assistant, null);
    const fb = await call('POST', '/api/admin/feedbacks', tok.adminA, { pageSize: 5000 });
    assert.equal(fb.statusCode, 200, fb.body);
    const fbRec = fb.json().data.find((h: any) => h._id === recordId);
    assert.ok(fbRec, 'the feedback is still listed');
    assert.equal(fbRec.assistant, null);
  });

  test('a transfer locks the institution before the user whatever its direction (the order of a Q&A payment from a pool)', async () => {
    // A payment from an institution's pool updates the institution, then the asking user; a transfer from a
    // user to an institution that took the user first could deadlock with it on PostgreSQL. PGlite runs one
    // statement at a time and cannot show that deadlock: this checks the order of the statements sent.
    const u = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' }, fields: { credits: '10' } });
    const sent: string[] = [];
    const logged = drizzle(t.database.pglite as PGlite, { schema, logger: { logQuery: (query) => void sent.push(query) } }) as unknown as Db;
    const moved = await transferCredits(logged, { user: u.id }, { institution: w.a1.id }, 4, w.superadmin.id);
    assert.ok(moved);
    assert.equal(moved.from, 6);
    const first = (re: RegExp) => sent.findIndex((q) => re.test(q));
    const lockInstitution = first(/from institutions .*for update/);
    const lockUser = first(/from users .*for update/);
    assert.ok(lockInstitution >= 0 && lockUser > lockInstitution, sent.join('\n'));
    assert.ok(first(/update "users"/) > lockUser && first(/update "institutions"/) > lockUser, sent.join('\n'));
  });

  test('OpenAPI documents every admin route under the admin tag with security', async () => {
    const spec = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
    const expected: Array<[string, string]> = [
      ['/api/admin/account', 'post'],
      ['/api/admin/account/{id}', 'get'],
      ['/api/admin/account/{id}', 'patch'],
      ['/api/admin/account/{id}', 'delete'],
      ['/api/admin/accounts', 'post'],
      ['/api/admin/institution', 'post'],
      ['/api/admin/institutions', 'get'],
      ['/api/admin/institution/{id}', 'get'],
      ['/api/admin/institution/{id}', 'patch'],
      ['/api/admin/institution/{id}', 'delete'],
      ['/api/admin/institution/{id}/credits', 'post'],
      ['/api/admin/user', 'post'],
      ['/api/admin/users', 'get'],
      ['/api/admin/user/{id}', 'get'],
      ['/api/admin/user/{id}', 'patch'],
      ['/api/admin/user/{id}', 'delete'],
      ['/api/admin/user/{id}/credits', 'post'],
      ['/api/admin/credits/transfer', 'post'],
      ['/api/admin/membership', 'post'],
      ['/api/admin/membership', 'delete'],
    ];
    for (const [path, method] of expected) {
      const op = spec.paths[path]?.[method];
      assert.ok(op, `${method} ${path} is documented`);
      assert.deepEqual(op.tags, ['admin']);
      assert.ok(op.summary);
      assert.ok(op.security?.length > 0);
    }
    // the spec's versioning: limitsearch is deprecated in favour of pageSize, in every listing that takes it
    for (const path of ['/api/admin/sessions', '/api/admin/feedbacks', '/api/admin/assistants']) {
      const body = spec.paths[path].post.requestBody.content['application/json'].schema;
      assert.equal(body.properties.limitsearch.deprecated, true, path);
      assert.equal(body.properties.pageSize.deprecated, undefined, path);
    }
  });
});

test('creditsTotal is credits + creditsUsed to the ten-thousandth, without a binary-float tail', async () => {
  const { creditsTotal, presentInstitutionsUsage } = await import('../src/modules/tenancy/tenancy.presenters.js');
  assert.notEqual(0.1 + 0.2, 0.3);
  assert.equal(creditsTotal(0.1, 0.2), 0.3);
  assert.equal(creditsTotal(1234.5678, 0.0001), 1234.5679);
  assert.deepEqual(presentInstitutionsUsage({ accountId: 'a', count: 2, credits: 0.1, creditsUsed: 0.2 }), { count: 2, credits: 0.1, creditsUsed: 0.2, creditsTotal: 0.3, creditsUsagePct: 66.67 });
});
