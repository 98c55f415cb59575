import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { updateAccount, updateInstitution } from '../src/modules/tenancy/tenancy.repository.js';
import { bearer, login, makeAccount, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

/** A refresh refused while the account or institution is inactive keeps the token usable; the session's institution follows its enrolments. */
describe('refresh: refusals and the current institution', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let root: string;
  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    root = (await login(t.app, w.superadmin.email)).accessToken;
  });
  after(() => t.close());

  const refresh = (refreshToken: string) => t.app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken } });

  test('a refresh refused because the account is inactive does not burn the refresh token: reactivated, the same token works again', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
    const { refreshToken } = await login(t.app, user.email);
    await updateAccount(t.database.db, account.id, { status: 'inactive' }, new Date());
    const refused = await refresh(refreshToken);
    assert.equal(refused.statusCode, 401);
    await updateAccount(t.database.db, account.id, { status: 'active' }, new Date());
    const again = await refresh(refreshToken);
    assert.equal(again.statusCode, 200, `the session was meant to work again once reactivated (identity.service.ts: "without ending the session: reactivated, it works again"): ${again.body}`);
  });

  test('same through the admin API: institution made inactive then active again, the refresh token still works', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
    const { refreshToken } = await login(t.app, user.email);
    const off = await t.app.inject({ method: 'PATCH', url: `/api/admin/institution/${inst.id}`, headers: bearer(root), payload: { status: 'inactive' } });
    assert.equal(off.statusCode, 200, off.body);
    assert.equal((await refresh(refreshToken)).statusCode, 401);
    const on = await t.app.inject({ method: 'PATCH', url: `/api/admin/institution/${inst.id}`, headers: bearer(root), payload: { status: 'active' } });
    assert.equal(on.statusCode, 200, on.body);
    const again = await refresh(refreshToken);
    assert.equal(again.statusCode, 200, again.body);
  });

  /** A user enrolled in two institutions of a new account, logged in (the first is current): its refresh token. */
  async function twoInstitutionsUser() {
    const account = await makeAccount(t.database);
    const i1 = await makeInstitution(t.database, account.id, { name: 'AAA first' });
    const i2 = await makeInstitution(t.database, account.id, { name: 'BBB second' });
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [i1.id]: 'user', [i2.id]: 'user' } });
    const { refreshToken, body } = await login(t.app, user.email);
    assert.equal(body.user.institution, i1.id);
    return { user, i1, i2, refreshToken };
  }

  /** A refresh after the session's institution stopped being the user's: the pair, /me and the next refresh name the other one. */
  async function refreshMovesTo(refreshToken: string, left: string, expected: string) {
    const r = await refresh(refreshToken);
    assert.equal(r.statusCode, 200, r.body);
    assert.notEqual(r.json().user.institution, left);
    assert.equal(r.json().user.institution, expected, 'the institution a login would pick');
    const me = await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(r.json().accessToken) });
    assert.equal(me.statusCode, 200);
    assert.equal(me.json().data.institution, expected, 'refresh answer and GET /me agree on the current institution');
    // the session itself moved: its next refresh carries the same
    const next = await refresh(r.json().refreshToken);
    assert.equal(next.json().user.institution, expected);
  }

  test('the refresh answer names as current institution only one the user still belongs to (as GET /me does)', async () => {
    const { i1, i2, refreshToken } = await twoInstitutionsUser();
    await updateInstitution(t.database.db, i1.id, { status: 'inactive' }, new Date());
    await refreshMovesTo(refreshToken, i1.id, i2.id);
  });

  test('after an admin removes the user from its current institution, the refresh answer does not name it as current', async () => {
    const { user, i1, i2, refreshToken } = await twoInstitutionsUser();
    const gone = await t.app.inject({ method: 'DELETE', url: '/api/admin/membership', headers: bearer(root), payload: { user: user.id, institution: i1.id } });
    assert.equal(gone.statusCode, 200, gone.body);
    await refreshMovesTo(refreshToken, i1.id, i2.id);
  });
});
