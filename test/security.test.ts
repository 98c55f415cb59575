import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { sql } from 'drizzle-orm';
import { ConfigError, loadConfig } from '../src/config.js';
import { IdentityService, SessionIssuer } from '../src/modules/identity/identity.service.js';
import { updateAccount, updateInstitution } from '../src/modules/tenancy/tenancy.repository.js';
import { checkUrlList, checkUrlValue } from '../src/modules/tenancy/urls.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeAccount, makeInstitution, makeUser, makeWorld, PASSWORD, startTestApp, type TestApp } from './support/app.js';

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

/**
 * Rows 2–10, 12 and 13 of issue 7 (the probe's findings), each proved here; see each test's name.
 */
describe('security: findings of the probe (issue 7)', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const tok: Record<'root' | 'adminA' | 'adminB' | 'instAdminA1' | 'userA1', string> = { root: '', adminA: '', adminB: '', instAdminA1: '', userA1: '' };

  const call = (method: Method, url: string, token?: string, payload?: unknown, headers: Record<string, string> = {}) =>
    t.app.inject({ method, url, headers: { ...(token ? bearer(token) : {}), ...headers }, ...(payload !== undefined ? { payload: payload as object } : {}) });

  /** balance = sum(delta) of its ledger rows, for every user and institution of the account. */
  async function assertLedgerExplains(accountId: string) {
    const rows = await t.database.db.execute<{ kind: string; id: string; balance: string; derived: string }>(sql`
      select 'user' as kind, u.id, u.credits::text as balance, coalesce((select sum(l.delta) from credit_ledger l where l.user_id = u.id), 0)::text as derived
        from users u where u.account_id = ${accountId}
      union all
      select 'institution', i.id, i.credits::text, coalesce((select sum(l.delta) from credit_ledger l where l.institution_id = i.id), 0)::text
        from institutions i where i.account_id = ${accountId}`);
    const list = (rows as unknown as { rows: Array<{ kind: string; id: string; balance: string; derived: string }> }).rows;
    assert.ok(list.length > 0);
    for (const r of list) assert.equal(Number(r.balance), Number(r.derived), `${r.kind} ${r.id}: balance ${r.balance} but ledger says ${r.derived}`);
  }

  const ledgerOf = async (where: ReturnType<typeof sql>) =>
    ((await t.database.db.execute(sql`select kind, delta::float8 as delta, ref_id as "refId", actor_user_id as "actor" from credit_ledger where ${where} order by created_at, id`)) as unknown as {
      rows: Array<{ kind: string; delta: number; refId: string | null; actor: string | null }>;
    }).rows;

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

  // ───────────── row 2 and row 6: credits are conserved ─────────────

  test('row 2: creditAward is paid once per (user, institution), ever: enrol, unenrol, enrol again pays nothing more', async () => {
    const create = await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Award Lab', ainame: 'Ada', poolCredits: false, creditAward: 100, credits: 1000 });
    assert.equal(create.statusCode, 201, create.body);
    const inst = create.json().data;
    const user = await makeUser(t.database, { accountId: w.accountA.id });
    for (let i = 0; i < 3; i++) {
      const enrol = await call('POST', '/api/admin/membership', tok.adminA, { user: user.id, institution: inst._id, role: 'user' });
      assert.equal(enrol.statusCode, 201, enrol.body);
      const gone = await call('DELETE', '/api/admin/membership', tok.adminA, { user: user.id, institution: inst._id });
      assert.equal(gone.statusCode, 200, gone.body);
    }
    const me = await call('GET', `/api/admin/user/${user.id}`, tok.root);
    assert.equal(me.json().data.credits, 100, 'the award is paid once');
    const i = await call('GET', `/api/admin/institution/${inst._id}`, tok.root);
    assert.equal(i.json().data.credits, 900, 'the award comes out of the institution balance: nothing appears from nothing');
    const awards = await ledgerOf(sql`kind = 'award' and (user_id = ${user.id} or institution_id = ${inst._id})`);
    assert.deepEqual(awards.map((r) => r.delta).sort((a, b) => a - b), [-100, 100]);
    assert.equal(awards[0]!.refId, awards[1]!.refId, 'the two award rows share a refId');
    await assertLedgerExplains(w.accountA.id);
  });

  test('row 2: an institution that cannot cover its award pays none (and pays it once, later, when funded)', async () => {
    const inst = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Poor Lab', ainame: 'Ada', poolCredits: false, creditAward: 50 })).json().data;
    const user = await makeUser(t.database, { accountId: w.accountA.id });
    assert.equal((await call('POST', '/api/admin/membership', tok.adminA, { user: user.id, institution: inst._id, role: 'user' })).statusCode, 201);
    assert.equal((await call('GET', `/api/admin/user/${user.id}`, tok.root)).json().data.credits, 0);
    assert.equal((await call('POST', `/api/admin/institution/${inst._id}/credits`, tok.root, { amount: 60 })).statusCode, 200);
    await call('DELETE', '/api/admin/membership', tok.adminA, { user: user.id, institution: inst._id });
    await call('POST', '/api/admin/membership', tok.adminA, { user: user.id, institution: inst._id, role: 'user' });
    await call('DELETE', '/api/admin/membership', tok.adminA, { user: user.id, institution: inst._id });
    await call('POST', '/api/admin/membership', tok.adminA, { user: user.id, institution: inst._id, role: 'user' });
    assert.equal((await call('GET', `/api/admin/user/${user.id}`, tok.root)).json().data.credits, 50);
    assert.equal((await call('GET', `/api/admin/institution/${inst._id}`, tok.root)).json().data.credits, 10);
    await assertLedgerExplains(w.accountA.id);
  });

  test('row 2 and row 6: account admins cannot mint (403 on top-ups, on opening balances); only a superadmin mints, each a ledger row', async () => {
    const inst = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Mint Lab', ainame: 'Ada', credits: 10 })).json().data;
    const mint = await call('POST', `/api/admin/institution/${inst._id}/credits`, tok.adminA, { amount: 1e9 });
    assert.equal(mint.statusCode, 403, mint.body);
    const own = await call('POST', `/api/admin/user/${w.accountAdminA.id}/credits`, tok.adminA, { amount: 1e9 });
    assert.equal(own.statusCode, 403, own.body);
    const opening = await call('POST', '/api/admin/institution', tok.adminA, { account: w.accountA.id, name: 'Rich Lab', ainame: 'Ada', credits: 1e9 });
    assert.equal(opening.statusCode, 403, opening.body);
    const userWithCredits = await call('POST', '/api/admin/user', tok.adminA, {
      email: `rich-${newId().slice(-8)}@acme.test`, password: 'long-enough-1', fname: 'R', lname: 'R', account: w.accountA.id, institutions: [], credits: 1e9,
    });
    assert.equal(userWithCredits.statusCode, 403, userWithCredits.body);
    assert.equal((await call('GET', `/api/admin/institution/${inst._id}`, tok.root)).json().data.credits, 10);

    const up = await call('POST', `/api/admin/institution/${inst._id}/credits`, tok.root, { amount: 5 });
    assert.equal(up.json().data.credits, 15);
    const down = await call('POST', `/api/admin/institution/${inst._id}/credits`, tok.root, { amount: -2 });
    assert.equal(down.json().data.credits, 13);
    const rows = await ledgerOf(sql`institution_id = ${inst._id}`);
    assert.deepEqual(rows.map((r) => [r.kind, r.delta, r.actor]), [['topup', 10, w.superadmin.id], ['topup', 5, w.superadmin.id], ['correction', -2, w.superadmin.id]]);
    assert.equal((await call('POST', `/api/admin/institution/${inst._id}/credits`, tok.root, { amount: 1e9 + 1 })).statusCode, 400, 'amounts are bounded');
    await assertLedgerExplains(w.accountA.id);
  });

  test('row 6: an account admin moves credits it holds (transfer between balances of its account), atomically, with a ledger pair', async () => {
    const from = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Source', ainame: 'Ada', credits: 100 })).json().data;
    const to = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Target', ainame: 'Ada' })).json().data;
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [to._id]: 'user' } });

    const moved = await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id }, to: { institution: to._id }, amount: 30 });
    assert.equal(moved.statusCode, 200, moved.body);
    assert.deepEqual(moved.json().data.from, { institution: from._id, credits: 70 });
    assert.deepEqual(moved.json().data.to, { institution: to._id, credits: 30 });
    const toUser = await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: to._id }, to: { user: member.id }, amount: 10.5 });
    assert.equal(toUser.statusCode, 200, toUser.body);
    assert.deepEqual(toUser.json().data.to, { user: member.id, credits: 10.5 });

    const pair = await ledgerOf(sql`ref_id = ${moved.json().data.refId}`);
    assert.deepEqual(pair.map((r) => [r.kind, r.delta]).sort(), [['transfer_in', 30], ['transfer_out', -30]]);

    // More than the source holds: 400 and nothing moves.
    const over = await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id }, to: { institution: to._id }, amount: 70.0001 });
    assert.equal(over.statusCode, 400, over.body);
    // Another account's balance: 404; an institution admin: 403; same balance both sides, zero, too many decimals, no source: 400.
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminB, { from: { institution: from._id }, to: { institution: w.b1.id }, amount: 1 })).statusCode, 404);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id }, to: { institution: w.b1.id }, amount: 1 })).statusCode, 404);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.instAdminA1, { from: { institution: w.a1.id }, to: { user: w.userA1.id }, amount: 1 })).statusCode, 403);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.userA1, { from: { institution: from._id }, to: { user: w.userA1.id }, amount: 1 })).statusCode, 403);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id }, to: { institution: from._id }, amount: 1 })).statusCode, 400);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id }, to: { institution: to._id }, amount: 0 })).statusCode, 400);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id }, to: { institution: to._id }, amount: 0.00001 })).statusCode, 400);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: {}, to: { institution: to._id }, amount: 1 })).statusCode, 400);
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id, user: member.id }, to: { institution: to._id }, amount: 1 })).statusCode, 400);
    assert.equal((await call('GET', `/api/admin/institution/${from._id}`, tok.root)).json().data.credits, 70);
    await assertLedgerExplains(w.accountA.id);
  });

  test('row 6: concurrent transfers never overdraw the source (each debit is one conditional UPDATE; on PGlite statements run one at a time, so this proves the rule, not a lock)', async () => {
    const from = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Race source', ainame: 'Ada', credits: 10 })).json().data;
    const to = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Race target', ainame: 'Ada' })).json().data;
    const res = await Promise.all(Array.from({ length: 25 }, () => call('POST', '/api/admin/credits/transfer', tok.adminA, { from: { institution: from._id }, to: { institution: to._id }, amount: 1 })));
    assert.equal(res.filter((r) => r.statusCode === 200).length, 10);
    assert.equal(res.filter((r) => r.statusCode === 400).length, 15);
    assert.equal((await call('GET', `/api/admin/institution/${from._id}`, tok.root)).json().data.credits, 0);
    assert.equal((await call('GET', `/api/admin/institution/${to._id}`, tok.root)).json().data.credits, 10);
    await assertLedgerExplains(w.accountA.id);
  });

  test('row 6: a retried credit movement with its Idempotency-Key moves credits once (transfers and top-ups); concurrent retries too', async () => {
    const from = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Retry source', ainame: 'Ada', credits: 100 })).json().data;
    const to = (await call('POST', '/api/admin/institution', tok.root, { account: w.accountA.id, name: 'Retry target', ainame: 'Ada' })).json().data;
    const body = { from: { institution: from._id }, to: { institution: to._id }, amount: 25 };
    const first = await call('POST', '/api/admin/credits/transfer', tok.adminA, body, { 'idempotency-key': 'transfer-1' });
    assert.equal(first.statusCode, 200, first.body);
    const retry = await call('POST', '/api/admin/credits/transfer', tok.adminA, body, { 'idempotency-key': 'transfer-1' });
    assert.equal(retry.statusCode, 200, retry.body);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.deepEqual(retry.json(), first.json());
    // concurrent retries of a new key: one moves, the others replay it or are told it still runs (409), none moves again.
    // (What admits one is the key's primary key, claimed by one INSERT … ON CONFLICT: a rule of the index, not a lock, so it
    // holds on PostgreSQL as here, where PGlite runs the statements one at a time.)
    const burst = await Promise.all(Array.from({ length: 10 }, () => call('POST', '/api/admin/credits/transfer', tok.adminA, body, { 'idempotency-key': 'transfer-2' })));
    const statuses = burst.map((r) => r.statusCode);
    assert.ok(statuses.every((s) => s === 200 || s === 409), statuses.join(','));
    assert.equal(new Set(burst.filter((r) => r.statusCode === 200).map((r) => r.json().data.refId)).size, 1, 'one transfer behind every 200');
    assert.equal((await call('GET', `/api/admin/institution/${from._id}`, tok.root)).json().data.credits, 50, 'two transfers of 25, not twelve');
    assert.equal((await ledgerOf(sql`institution_id = ${from._id} and kind = 'transfer_out'`)).length, 2);
    // the same key with another amount: 400, nothing moves
    const other = await call('POST', '/api/admin/credits/transfer', tok.adminA, { ...body, amount: 1 }, { 'idempotency-key': 'transfer-1' });
    assert.equal(other.statusCode, 400, other.body);
    assert.equal(other.json().error.details[0].field, 'Idempotency-Key');
    // a refused movement gives its key back: after funding, its retry moves
    const over = { from: { institution: from._id }, to: { institution: to._id }, amount: 80 };
    assert.equal((await call('POST', '/api/admin/credits/transfer', tok.adminA, over, { 'idempotency-key': 'transfer-3' })).statusCode, 400);
    const topup = await call('POST', `/api/admin/institution/${from._id}/credits`, tok.root, { amount: 30 }, { 'idempotency-key': 'topup-1' });
    assert.equal(topup.json().data.credits, 80);
    const topupAgain = await call('POST', `/api/admin/institution/${from._id}/credits`, tok.root, { amount: 30 }, { 'idempotency-key': 'topup-1' });
    assert.equal(topupAgain.headers['idempotent-replayed'], 'true');
    assert.equal(topupAgain.json().data.credits, 80);
    // the key names the target too: the same key and amount for another institution is another request
    assert.equal((await call('POST', `/api/admin/institution/${to._id}/credits`, tok.root, { amount: 30 }, { 'idempotency-key': 'topup-1' })).statusCode, 400);
    const userTopup = await call('POST', `/api/admin/user/${w.userA1.id}/credits`, tok.root, { amount: 2 }, { 'idempotency-key': 'topup-user-1' });
    const userAgain = await call('POST', `/api/admin/user/${w.userA1.id}/credits`, tok.root, { amount: 2 }, { 'idempotency-key': 'topup-user-1' });
    assert.deepEqual(userAgain.json(), userTopup.json());
    assert.equal((await ledgerOf(sql`user_id = ${w.userA1.id} and kind = 'topup' and delta = 2`)).length, 1);
    const funded = await call('POST', '/api/admin/credits/transfer', tok.adminA, over, { 'idempotency-key': 'transfer-3' });
    assert.equal(funded.statusCode, 200, funded.body);
    assert.equal(funded.headers['idempotent-replayed'], undefined);
    assert.equal(funded.json().data.from.credits, 0);
    await assertLedgerExplains(w.accountA.id);
  });

  // ───────────── row 3: the dev outbox ─────────────

  test('row 3: GET /api/dev/outbox does not exist unless DEV_OUTBOX=true (this app: test mode, no DEV_OUTBOX)', async () => {
    const res = await call('GET', '/api/dev/outbox', tok.root);
    assert.equal(res.statusCode, 404);
    assert.equal(res.json().error.code, 'NOT_FOUND');
  });

  // ───────────── row 4: switch mints no refresh token ─────────────

  test('row 4: switching institution with an access token returns an access token only; the refresh token keeps working once and carries the new institution', async () => {
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    const first = await login(t.app, user.email);
    const res = await call('POST', '/api/user/institution/switch', first.accessToken, { institution: w.a2.id });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.refreshToken, undefined, 'no refresh token from an access token');
    assert.equal(body.user.institution, w.a2.id);
    assert.equal(res.headers['cache-control'], 'no-store');
    const me = await call('GET', '/api/user/me', body.accessToken);
    assert.equal(me.json().data.institution, w.a2.id);
    const refreshed = await call('POST', '/api/auth/refresh', undefined, { refreshToken: first.refreshToken });
    assert.equal(refreshed.statusCode, 200, refreshed.body);
    assert.equal(refreshed.json().user.institution, w.a2.id);

    // With the session's current refresh token in the body, the pair is rotated; a wrong one is refused.
    const pair = await call('POST', '/api/user/institution/switch', refreshed.json().accessToken, { institution: w.a1.id, refreshToken: refreshed.json().refreshToken });
    assert.equal(pair.statusCode, 200, pair.body);
    assert.ok(pair.json().refreshToken);
    // another session's refresh token: 401, and this session goes on (it proves nothing about this session's tokens)
    const other = await login(t.app, user.email);
    const foreign = await call('POST', '/api/user/institution/switch', pair.json().accessToken, { institution: w.a2.id, refreshToken: other.refreshToken });
    assert.equal(foreign.statusCode, 401);
    assert.equal((await call('GET', '/api/user/me', pair.json().accessToken)).statusCode, 200);
    // the token the switch rotated away, presented again (to refresh): reuse, the session ends
    assert.equal((await call('POST', '/api/auth/refresh', undefined, { refreshToken: refreshed.json().refreshToken })).statusCode, 401, 'the rotated one is spent');
    assert.equal((await call('GET', '/api/user/me', pair.json().accessToken)).statusCode, 401);
  });

  test('a refresh token rotated away, presented again to the switch: reuse, as on refresh; the session is revoked at once', async () => {
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    const first = await login(t.app, user.email);
    const pair = await call('POST', '/api/user/institution/switch', first.accessToken, { institution: w.a2.id, refreshToken: first.refreshToken });
    assert.equal(pair.statusCode, 200, pair.body);
    assert.equal((await call('GET', '/api/user/me', pair.json().accessToken)).statusCode, 200);
    // the first refresh token again (a copy of it exists somewhere)
    const reused = await call('POST', '/api/user/institution/switch', pair.json().accessToken, { institution: w.a1.id, refreshToken: first.refreshToken });
    assert.equal(reused.statusCode, 401, reused.body);
    assert.match(reused.json().message, /already used; the session has been revoked/);
    assert.equal((await call('GET', '/api/user/me', pair.json().accessToken)).statusCode, 401, 'the session ends on this node at once (cached auth dropped)');
    assert.equal((await call('POST', '/api/auth/refresh', undefined, { refreshToken: pair.json().refreshToken })).statusCode, 401);
    assert.equal((await call('GET', '/api/user/me', first.accessToken)).statusCode, 401);
  });

  // ───────────── row 5: inactive accounts and institutions ─────────────

  test('row 5: members of an inactive account are refused at login (403) and on every request (401); reactivated they are back', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
    const { accessToken, refreshToken } = await login(t.app, user.email);
    await updateAccount(t.database.db, account.id, { status: 'inactive' }, new Date());
    const me = await call('GET', '/api/user/me', accessToken);
    assert.equal(me.statusCode, 401);
    const files = await call('GET', '/api/user/files', accessToken);
    assert.equal(files.statusCode, 401);
    const again = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD } });
    assert.equal(again.statusCode, 403);
    assert.equal(again.json().error.code, 'FORBIDDEN');
    assert.equal((await call('POST', '/api/auth/refresh', undefined, { refreshToken })).statusCode, 401, 'no new tokens either');
    await updateAccount(t.database.db, account.id, { status: 'active' }, new Date());
    assert.equal((await call('GET', '/api/user/me', accessToken)).statusCode, 200);
  });

  test("row 5: a superadmin whose home account is made inactive keeps its session and can sign in, so that it can reactivate the account", async () => {
    const account = await makeAccount(t.database);
    const root = await makeUser(t.database, { accountId: account.id, role: 'superadmin' });
    const plain = await makeUser(t.database, { accountId: account.id });
    const { accessToken } = await login(t.app, root.email);
    const off = await call('PATCH', `/api/admin/account/${account.id}`, accessToken, { status: 'inactive' });
    assert.equal(off.statusCode, 200, off.body);
    assert.equal((await call('GET', '/api/user/me', accessToken)).statusCode, 200);
    const again = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: root.email, password: PASSWORD } });
    assert.equal(again.statusCode, 200, again.body);
    // the account's other users are refused meanwhile
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: plain.email, password: PASSWORD } })).statusCode, 403);
    const on = await call('PATCH', `/api/admin/account/${account.id}`, accessToken, { status: 'active' });
    assert.equal(on.statusCode, 200, on.body);
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: plain.email, password: PASSWORD } })).statusCode, 200);
  });

  test('row 5: an inactive institution gives its members nothing: refused at login when it is their only one, not their current institution, not switchable', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const other = await makeInstitution(t.database, account.id);
    const only = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
    const both = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user', [other.id]: 'user' } });
    const onlyTokens = await login(t.app, only.email);
    const bothTokens = await login(t.app, both.email);
    assert.equal(bothTokens.body.user.institution, inst.id);
    await updateInstitution(t.database.db, inst.id, { status: 'inactive' }, new Date());

    const refused = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: only.email, password: PASSWORD } });
    assert.equal(refused.statusCode, 403);
    assert.equal((await call('GET', '/api/user/me', onlyTokens.accessToken)).statusCode, 401, 'a member whose only institution is inactive is refused on every request');
    assert.equal((await call('POST', '/api/auth/refresh', undefined, { refreshToken: onlyTokens.refreshToken })).statusCode, 401);
    const me = await call('GET', '/api/user/me', bothTokens.accessToken);
    assert.equal(me.statusCode, 200);
    assert.equal(me.json().data.institution, null, 'the inactive institution is no longer current');
    assert.equal((await call('POST', '/api/user/institution/switch', bothTokens.accessToken, { institution: inst.id })).statusCode, 403);
    const relogin = await login(t.app, both.email);
    assert.equal(relogin.body.user.institution, other.id, 'login picks an active institution');
  });

  // ───────────── row 7: currentPassword guesses are rate limited ─────────────

  test('row 7: wrong currentPassword on PATCH /api/user/me is rate limited (429 with Retry-After)', async () => {
    const user = await makeUser(t.database, { accountId: w.accountA.id });
    const { accessToken } = await login(t.app, user.email);
    const statuses: number[] = [];
    let last;
    for (let i = 0; i < 12; i++) {
      last = await call('PATCH', '/api/user/me', accessToken, { currentPassword: `wrong-${i}`, password: 'new-password-123' });
      statuses.push(last.statusCode);
    }
    assert.deepEqual(statuses.slice(0, 10), Array(10).fill(403));
    assert.deepEqual(statuses.slice(10), [429, 429]);
    assert.equal(last!.json().error.code, 'RATE_LIMITED');
    assert.ok(Number(last!.headers['retry-after']) >= 1);
    // Profile edits without a password check are not limited.
    assert.equal((await call('PATCH', '/api/user/me', accessToken, { fname: 'Still' })).statusCode, 200);
  });

  // ───────────── row 8: a wrong refresh secret does not revoke ─────────────

  test('row 8: a refresh with the right session id and a wrong secret is a 401 that revokes nothing; reuse of a rotated token still revokes', async () => {
    const user = await makeUser(t.database, { accountId: w.accountA.id });
    const first = await login(t.app, user.email);
    const sessionId = first.refreshToken.split('.')[0]!;
    const forged = await call('POST', '/api/auth/refresh', undefined, { refreshToken: `${sessionId}.anything` });
    assert.equal(forged.statusCode, 401);
    assert.equal((await call('GET', '/api/user/me', first.accessToken)).statusCode, 200, 'the session survives');
    const second = await call('POST', '/api/auth/refresh', undefined, { refreshToken: first.refreshToken });
    assert.equal(second.statusCode, 200, 'the real refresh token still works');
    const reuse = await call('POST', '/api/auth/refresh', undefined, { refreshToken: first.refreshToken });
    assert.equal(reuse.statusCode, 401);
    assert.equal((await call('GET', '/api/user/me', second.json().accessToken)).statusCode, 401, 'reuse of a once-valid token revokes the session');
  });

  // ───────────── row 9: e-mail existence across tenants ─────────────

  test('row 9: the refusal of a taken e-mail has the same status and body whichever tenant holds the address', async () => {
    const body = (email: string) => ({ email, password: 'long-enough-1', fname: 'N', lname: 'N', account: w.accountA.id, institutions: [{ institution: w.a1.id, role: 'user' }] });
    const foreign = await call('POST', '/api/admin/user', tok.instAdminA1, body(w.userB1.email.toUpperCase()));
    const own = await call('POST', '/api/admin/user', tok.instAdminA1, body(w.userA2.email));
    assert.equal(foreign.statusCode, own.statusCode);
    assert.deepEqual(foreign.json(), own.json());
    assert.equal(foreign.statusCode, 409);
    assert.doesNotMatch(foreign.body, new RegExp(w.accountB.id));
  });

  test('row 9: after a few refused e-mails an admin may create no user for the rest of the hour, whatever the address (the one bit "taken" cannot be harvested)', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id);
    const admin = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'admin' } });
    const { accessToken } = await login(t.app, admin.email);
    const body = (email: string) => ({ email, password: 'long-enough-1', fname: 'N', lname: 'N', account: account.id, institutions: [{ institution: inst.id, role: 'user' }] });
    const probes = [w.userB1.email, w.userA1.email, w.accountAdminB.email, w.superadmin.email, w.userA2.email];
    for (const email of probes) assert.equal((await call('POST', '/api/admin/user', accessToken, body(email))).statusCode, 409);
    const fresh = await call('POST', '/api/admin/user', accessToken, body(`fresh-${newId().slice(-10)}@example.com`));
    assert.equal(fresh.statusCode, 429, fresh.body);
    assert.ok(Number(fresh.headers['retry-after']) >= 1);
    const taken = await call('POST', '/api/admin/user', accessToken, body(w.userB1.email));
    assert.deepEqual([taken.statusCode, taken.json()], [fresh.statusCode, fresh.json()], 'taken and fresh addresses now look the same');
    const root = await call('POST', '/api/admin/user', tok.root, body(`root-made-${newId().slice(-10)}@example.com`));
    assert.equal(root.statusCode, 201, 'other admins are not affected');
  });

  // ───────────── row 10: LTI context ids, URL fields ─────────────

  test('row 10: an LTI context id belongs to one institution: claiming another tenant\'s is 409 and changes nothing', async () => {
    const ctxId = `https://lms.example.edu/course/${newId()}`;
    const b = await call('PATCH', `/api/admin/institution/${w.b1.id}`, tok.adminB, { ltiContextIds: [ctxId] });
    assert.equal(b.statusCode, 200, b.body);
    const steal = await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.instAdminA1, { ltiContextIds: [ctxId], about: 'stolen' });
    assert.equal(steal.statusCode, 409, steal.body);
    assert.equal(steal.json().error.code, 'CONFLICT');
    const a1 = await call('GET', `/api/admin/institution/${w.a1.id}`, tok.root);
    assert.deepEqual(a1.json().data.ltiContextIds, []);
    assert.notEqual(a1.json().data.about, 'stolen');
    const create = await call('POST', '/api/admin/institution', tok.adminA, { account: w.accountA.id, name: 'Thief', ainame: 'T', ltiContextIds: [ctxId] });
    assert.equal(create.statusCode, 409, create.body);
    // Releasing it lets another institution take it; the same id twice in one list is one id.
    assert.equal((await call('PATCH', `/api/admin/institution/${w.b1.id}`, tok.adminB, { ltiContextIds: [] })).statusCode, 200);
    const taken = await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.instAdminA1, { ltiContextIds: [ctxId, ctxId] });
    assert.equal(taken.statusCode, 200, taken.body);
    assert.deepEqual(taken.json().data.ltiContextIds, [ctxId]);
    await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.instAdminA1, { ltiContextIds: [] });
  });

  test('row 10: URL fields accept https (http outside production) and refuse javascript:, data:, * and non-URLs', async () => {
    for (const [field, value] of [
      ['picture', 'javascript:alert(1)'],
      ['picture_bg', 'data:text/html,<script>alert(1)</script>'],
      ['picture_dark_bg', 'not a url'],
      ['picture_animated', 'ftp://example.com/a.gif'],
      ['publicAuthorizedUrls', ['*']],
      ['publicAuthorizedUrls', ['https://*.example.com']],
      ['invoices_urls', ['javascript:alert(1)']],
    ] as const) {
      const res = await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.instAdminA1, { [field]: value });
      assert.equal(res.statusCode, 400, `${field}=${JSON.stringify(value)}: ${res.body}`);
      assert.ok(res.json().error.details.some((d: { field?: string }) => d.field === field), res.body);
    }
    const ok = await call('PATCH', `/api/admin/institution/${w.a1.id}`, tok.instAdminA1, {
      picture: 'https://cdn.example.com/a.png',
      picture_bg: '',
      publicAuthorizedUrls: ['https://site.example.com', 'http://localhost:5173'],
      invoices_urls: ['https://billing.example.com/inv/1'],
    });
    assert.equal(ok.statusCode, 200, ok.body);
    const created = await call('POST', '/api/admin/institution', tok.adminA, { account: w.accountA.id, name: 'Bad', ainame: 'B', picture: 'javascript:alert(1)' });
    assert.equal(created.statusCode, 400);
  });

  test('row 10: in production only https is accepted (the rule the routes use)', () => {
    assert.equal(checkUrlValue('https://a.example.com/x.png', false), null);
    assert.notEqual(checkUrlValue('http://a.example.com/x.png', false), null);
    assert.equal(checkUrlValue('http://a.example.com/x.png', true), null);
    assert.notEqual(checkUrlValue('javascript:alert(1)', true), null);
    assert.notEqual(checkUrlValue('*', true), null);
    assert.notEqual(checkUrlList(['https://ok.example.com', '*'], false), null);
  });

  // ───────────── row 12: headers ─────────────

  test('row 12: security headers on every answer, no-store on token responses', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: w.userA1.email, password: PASSWORD } });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['x-content-type-options'], 'nosniff');
    assert.equal(res.headers['cache-control'], 'no-store');
    assert.ok(res.headers['x-frame-options']);
    const refreshed = await call('POST', '/api/auth/refresh', undefined, { refreshToken: res.json().refreshToken });
    assert.equal(refreshed.headers['cache-control'], 'no-store');
    const health = await t.app.inject({ method: 'GET', url: '/healthz' });
    assert.equal(health.headers['x-content-type-options'], 'nosniff');
    assert.equal(health.headers['strict-transport-security'], undefined, 'HSTS is off unless configured');
    // the whole set, on an answer that is an error too (a 404 of the router)
    const missing = await t.app.inject({ method: 'GET', url: '/api/no-such-route' });
    assert.equal(missing.statusCode, 404);
    // and on an answer of the router itself, before any hook runs (a malformed path)
    const badPath = await t.app.inject({ method: 'GET', url: '/api/%zz' });
    assert.equal(badPath.statusCode, 400);
    assert.equal(badPath.headers['cache-control'], 'no-store');
    assert.ok(badPath.headers['x-request-id']);
    for (const r of [health, missing, badPath]) {
      assert.equal(r.headers['x-frame-options'], 'SAMEORIGIN');
      assert.equal(r.headers['referrer-policy'], 'no-referrer');
      assert.equal(r.headers['cross-origin-opener-policy'], 'same-origin');
      assert.equal(r.headers['cross-origin-resource-policy'], 'same-origin');
      assert.equal(r.headers['x-permitted-cross-domain-policies'], 'none');
      assert.equal(r.headers['x-content-type-options'], 'nosniff');
    }
    assert.equal(missing.headers['cache-control'], 'no-store');
  });

  test('row 12: /metrics answers loopback callers without configuration, others need METRICS_TOKEN (401 otherwise)', async () => {
    const local = await t.app.inject({ method: 'GET', url: '/metrics' });
    assert.equal(local.statusCode, 200);
    const remote = await t.app.inject({ method: 'GET', url: '/metrics', remoteAddress: '203.0.113.7' });
    assert.equal(remote.statusCode, 401);
    assert.equal(remote.json().error.code, 'UNAUTHENTICATED');
    const proxied = await t.app.inject({ method: 'GET', url: '/metrics', headers: { 'x-forwarded-for': '203.0.113.7' } });
    assert.equal(proxied.statusCode, 401, 'a public request forwarded by a local proxy is not a loopback caller');
  });

  // ───────────── row 13: lockout is not a denial of service ─────────────

  test('row 13: ten wrong passwords from one address do not lock the owner out from another', async () => {
    const app = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_IP: '1000' } });
    try {
      const account = await makeAccount(app.database);
      const user = await makeUser(app.database, { accountId: account.id });
      const attacker = '198.51.100.9';
      for (let i = 0; i < 10; i++) {
        const r = await app.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: attacker, payload: { email: user.email, password: `guess-${i}` } });
        assert.equal(r.statusCode, 401);
      }
      const blocked = await app.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: attacker, payload: { email: user.email, password: PASSWORD } });
      assert.equal(blocked.statusCode, 429, 'the guessing address is stopped');
      assert.ok(Number(blocked.headers['retry-after']) >= 1);
      const owner = await app.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: '192.0.2.44', payload: { email: user.email, password: PASSWORD } });
      assert.equal(owner.statusCode, 200, owner.body);
    } finally {
      await app.close();
    }
  });

  test('row 13: behind a listed proxy (TRUST_PROXY=<addresses>) the client cannot choose its own IP in X-Forwarded-For', async () => {
    const app = await startTestApp({ env: { TRUST_PROXY: '127.0.0.1, ::1', LOGIN_RATE_LIMIT_PER_IP: '1000', LOGIN_RATE_LIMIT_PER_EMAIL: '5' } });
    try {
      const account = await makeAccount(app.database);
      const user = await makeUser(app.database, { accountId: account.id });
      // the proxy on loopback appends the address it saw; whatever the client wrote before it is not believed
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) {
        const r = await app.app.inject({ method: 'POST', url: '/api/auth/login', headers: { 'x-forwarded-for': `10.9.${i}.1, 198.51.100.9` }, payload: { email: user.email, password: `guess-${i}` } });
        statuses.push(r.statusCode);
      }
      assert.deepEqual(statuses, [401, 401, 401, 401, 401, 429]);
      // another client behind the same proxy is another address
      const owner = await app.app.inject({ method: 'POST', url: '/api/auth/login', headers: { 'x-forwarded-for': '192.0.2.44' }, payload: { email: user.email, password: PASSWORD } });
      assert.equal(owner.statusCode, 200, owner.body);
      // a request that did not come through a listed proxy: its header is not believed at all
      const direct = await app.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: '198.51.100.9', headers: { 'x-forwarded-for': '192.0.2.44' }, payload: { email: user.email, password: PASSWORD } });
      assert.equal(direct.statusCode, 429, 'the direct caller is 198.51.100.9, still limited');
    } finally {
      await app.close();
    }
    const env = { NODE_ENV: 'test', DATA_DIR: '/tmp/unused-trust-proxy', JWT_SECRET: 'x'.repeat(32), ENCRYPTION_KEY: 'y'.repeat(32) };
    assert.deepEqual(loadConfig({ ...env, TRUST_PROXY: '10.0.0.0/8, ::1,192.168.1.10' }).trustProxy, ['10.0.0.0/8', '::1', '192.168.1.10']);
    assert.equal(loadConfig({ ...env, TRUST_PROXY: 'true' }).trustProxy, true);
    assert.equal(loadConfig({ ...env }).trustProxy, false);
    for (const bad of ['proxy.local', '10.0.0.0/33', '10.0.0.1/8/1', ',']) {
      assert.throws(() => loadConfig({ ...env, TRUST_PROXY: bad }), (e: unknown) => e instanceof ConfigError && /TRUST_PROXY must be true, false, or a comma-separated list/u.test(e.message), bad);
    }
  });

  // ───────────── code read: MFA fails closed ─────────────

  test('code read: an MFA-enrolled user is never let in without the second factor, even by an identity service wired without one', async () => {
    const user = await makeUser(t.database, { accountId: w.accountA.id, fields: { mfaState: 'enrolled' } });
    // Wired by hand without a second factor (what the type no longer allows): refused, not let in.
    const bare = new (IdentityService as unknown as new (...args: unknown[]) => IdentityService)(t.app.ctx, new SessionIssuer(t.app.ctx));
    await assert.rejects(bare.login(user.email, PASSWORD, { ip: '127.0.0.1', ua: 'test' }), (err: Error & { statusCode?: number }) => err.statusCode === 403);
    // The normal login of an ordinary user still works through the same hand-wired service.
    const plain = await makeUser(t.database, { accountId: w.accountA.id });
    assert.ok('accessToken' in (await bare.login(plain.email, PASSWORD, { ip: '127.0.0.1', ua: 'test' })));
    const viaHttp = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD } });
    assert.equal(viaHttp.statusCode === 200 && viaHttp.json().accessToken !== undefined, false, viaHttp.body);
    assert.equal(viaHttp.json().mfaRequired, true);
  });

});

describe('security: configuration-dependent answers (rows 3, 12)', () => {
  test('row 3: with DEV_OUTBOX=true (not production) the outbox needs a superadmin: 401 anonymous, 403 for others, 200 for a superadmin', async () => {
    const t = await startTestApp({ env: { NODE_ENV: 'development', DEV_OUTBOX: 'true', LOGIN_RATE_LIMIT_PER_EMAIL: '1000' } });
    try {
      const account = await makeAccount(t.database);
      const admin = await makeUser(t.database, { accountId: account.id, role: 'accountadmin' });
      const root = await makeUser(t.database, { accountId: account.id, role: 'superadmin' });
      assert.equal((await t.app.inject({ method: 'GET', url: '/api/dev/outbox?to=x@example.com' })).statusCode, 401);
      const other = await login(t.app, admin.email);
      assert.equal((await t.app.inject({ method: 'GET', url: '/api/dev/outbox', headers: bearer(other.accessToken) })).statusCode, 403);
      const rootTokens = await login(t.app, root.email);
      const ok = await t.app.inject({ method: 'GET', url: '/api/dev/outbox', headers: bearer(rootTokens.accessToken) });
      assert.equal(ok.statusCode, 200, ok.body);
    } finally {
      await t.close();
    }
  });

  test('row 3: DEV_OUTBOX=true with NODE_ENV=production is refused at start; without DEV_OUTBOX development has no outbox', async () => {
    const { loadConfig } = await import('../src/config.js');
    assert.throws(
      () => loadConfig({ NODE_ENV: 'production', DEV_OUTBOX: 'true', JWT_SECRET: 'x'.repeat(40), ENCRYPTION_KEY: 'y'.repeat(40) }),
      /DEV_OUTBOX/,
    );
    const t = await startTestApp({ env: { NODE_ENV: 'development' } });
    try {
      assert.equal((await t.app.inject({ method: 'GET', url: '/api/dev/outbox' })).statusCode, 404);
    } finally {
      await t.close();
    }
  });

  test('row 12: METRICS_TOKEN guards /metrics for everyone; HSTS_MAX_AGE_SECONDS turns HSTS on; CORS_ORIGINS is an allow-list', async () => {
    const t = await startTestApp({ env: { METRICS_TOKEN: 'metrics-token-0123456789abcdef', HSTS_MAX_AGE_SECONDS: '31536000', CORS_ORIGINS: 'https://app.example.com, https://admin.example.com' } });
    try {
      assert.equal((await t.app.inject({ method: 'GET', url: '/metrics' })).statusCode, 401);
      assert.equal((await t.app.inject({ method: 'GET', url: '/metrics', headers: bearer('wrong-token') })).statusCode, 401);
      const ok = await t.app.inject({ method: 'GET', url: '/metrics', remoteAddress: '203.0.113.7', headers: bearer('metrics-token-0123456789abcdef') });
      assert.equal(ok.statusCode, 200);
      assert.match(ok.body, /http_requests_total/);

      const health = await t.app.inject({ method: 'GET', url: '/healthz' });
      assert.match(String(health.headers['strict-transport-security']), /max-age=31536000/);

      const allowed = await t.app.inject({ method: 'OPTIONS', url: '/api/user/me', headers: { origin: 'https://app.example.com', 'access-control-request-method': 'GET' } });
      assert.equal(allowed.statusCode, 204);
      assert.equal(allowed.headers['access-control-allow-origin'], 'https://app.example.com');
      // a browser of an allowed origin may send every request header the API reads, Idempotency-Key included, and read Idempotent-Replayed
      const keyed = await t.app.inject({
        method: 'OPTIONS',
        url: '/api/ai/personal/qanda',
        headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, x-access-token, idempotency-key' },
      });
      assert.equal(keyed.statusCode, 204);
      const allowedHeaders = String(keyed.headers['access-control-allow-headers']).toLowerCase().split(/\s*,\s*/);
      for (const name of ['authorization', 'x-access-token', 'content-type', 'x-request-id', 'idempotency-key']) assert.ok(allowedHeaders.includes(name), `${name} not in ${allowedHeaders.join(', ')}`);
      const answered = await t.app.inject({ method: 'GET', url: '/healthz', headers: { origin: 'https://app.example.com' } });
      const exposed = String(answered.headers['access-control-expose-headers']).toLowerCase().split(/\s*,\s*/);
      for (const name of ['retry-after', 'x-request-id', 'idempotent-replayed', 'etag', 'content-disposition']) assert.ok(exposed.includes(name), `${name} not in ${exposed.join(', ')}`);
      // the branding revalidated by a browser script: If-None-Match may be sent
      const revalidated = await t.app.inject({
        method: 'OPTIONS',
        url: '/api/agent/branding',
        headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, if-none-match' },
      });
      assert.equal(revalidated.statusCode, 204);
      assert.ok(String(revalidated.headers['access-control-allow-headers']).toLowerCase().split(/\s*,\s*/).includes('if-none-match'));
      const refused = await t.app.inject({ method: 'GET', url: '/healthz', headers: { origin: 'https://evil.example.com' } });
      assert.equal(refused.headers['access-control-allow-origin'], undefined);
    } finally {
      await t.close();
    }
    const { loadConfig } = await import('../src/config.js');
    assert.throws(() => loadConfig({ NODE_ENV: 'test', CORS_ORIGINS: '*', JWT_SECRET: 'x'.repeat(40), ENCRYPTION_KEY: 'y'.repeat(40) }), /CORS_ORIGINS/);
    assert.throws(() => loadConfig({ NODE_ENV: 'test', METRICS_TOKEN: 'short', JWT_SECRET: 'x'.repeat(40), ENCRYPTION_KEY: 'y'.repeat(40) }), /METRICS_TOKEN/);
  });

  test('row 12: a request whose headers are too large answers 431 in the contract\'s error body', async () => {
    const t = await startTestApp();
    try {
      await t.app.listen({ host: '127.0.0.1', port: 0 });
      const address = t.app.server.address();
      assert.ok(address && typeof address === 'object');
      const raw = await new Promise<string>((resolve, reject) => {
        const socket = connect(address.port, '127.0.0.1');
        let data = '';
        socket.on('data', (chunk) => (data += chunk.toString('utf8')));
        socket.on('end', () => resolve(data));
        socket.on('close', () => resolve(data));
        socket.on('error', reject);
        socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`);
      });
      assert.match(raw, /^HTTP\/1\.1 431 /);
      assert.match(raw, /\r\nx-content-type-options: nosniff\r\n/i);
      assert.match(raw, /\r\ncache-control: no-store\r\n/i);
      const body = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4));
      assert.deepEqual(body, { success: false, message: 'Request header fields are too large', error: { code: 'HEADERS_TOO_LARGE', details: [] } });
    } finally {
      await t.close();
    }
  });
});
