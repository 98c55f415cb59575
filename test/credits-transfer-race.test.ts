/**
 * A balance deleted while a transfer to it is under way: the service loads and checks both balances, then the
 * repository's transaction locks them; one deleted in between is a 404 and nothing moves (it was a 500, with the
 * debit rolled back). The concurrent DELETE is made deterministic by running it, over HTTP, as the transfer's
 * transaction starts. (PGlite runs one statement at a time: this shows the check after the lock, not the lock.)
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { bearer, login, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

describe('credits: a balance deleted during a transfer', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const tok: Record<string, string> = {};
  const call = (method: 'POST' | 'DELETE', url: string, token: string, payload?: object) =>
    t.app.inject({ method, url, headers: bearer(token), ...(payload ? { payload } : {}) });

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    tok.root = (await login(t.app, w.superadmin.email)).accessToken;
    tok.adminA = (await login(t.app, w.accountAdminA.email)).accessToken;
  });
  after(() => t.close());

  test('the target user deleted between the checks and the transfer: 404, nothing moves (not a 500)', async () => {
    assert.equal((await call('POST', `/api/admin/institution/${w.a2.id}/credits`, tok.root!, { amount: 100 })).statusCode, 200);
    const target = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a2.id]: 'user' } });

    const db = t.database.db as any;
    const original = db.transaction;
    let armed = true;
    db.transaction = async function (this: unknown, ...args: unknown[]) {
      if (armed) {
        armed = false;
        // another admin's request deletes the target while the transfer is about to move credits
        const del = await call('DELETE', `/api/admin/user/${target.id}`, tok.root!);
        assert.equal(del.statusCode, 200, del.body);
      }
      return original.apply(db, args);
    };
    let res;
    try {
      res = await call('POST', '/api/admin/credits/transfer', tok.adminA!, { from: { institution: w.a2.id }, to: { user: target.id }, amount: 40 });
    } finally {
      db.transaction = original;
    }
    assert.equal(armed, false, 'the delete ran');
    const [inst] = await rowsOf<{ c: string }>(t.database.db, sql`select credits::text as c from institutions where id = ${w.a2.id}`);
    assert.equal(Number(inst!.c), 100, 'the debit was rolled back');
    assert.equal(res.statusCode, 404, `expected 404 NOT_FOUND for a balance deleted meanwhile, got ${res.statusCode} ${res.body}`);
    assert.equal(res.json().error.code, 'NOT_FOUND');
    assert.equal((await rowsOf(t.database.db, sql`select 1 from credit_ledger where kind in ('transfer_in', 'transfer_out') and actor_user_id = ${w.accountAdminA.id}`)).length, 0, 'no ledger row');
  });
});
