import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isForeignKeyViolation, isLockConflict, isUniqueViolation, sqlState } from '../src/db/errors.js';

test("a database error's SQLSTATE is found through the wrappers' causes; Node's own error codes are not taken for one", () => {
  const wrapped = (code: string, depth: number): unknown => {
    let e: unknown = Object.assign(new Error('db'), { code });
    for (let i = 0; i < depth; i++) e = new Error('wrapper', { cause: e });
    return e;
  };
  assert.equal(sqlState(wrapped('23505', 0)), '23505');
  assert.equal(sqlState(wrapped('22P05', 2)), '22P05');
  // classes with letters: internal error, PL/pgSQL, feature not supported
  for (const code of ['XX000', 'P0001', '0A000']) assert.equal(sqlState(wrapped(code, 1)), code);
  // Node's system error codes are five capitals too
  for (const code of ['EPIPE', 'EBUSY', 'ECONNRESET', 'ERR_INVALID_ARG_TYPE', 'FST_ERR_CTP_INVALID_JSON_BODY']) assert.equal(sqlState(wrapped(code, 0)), undefined, code);
  assert.equal(sqlState(wrapped('23505', 5)), undefined, 'looked for a few levels only');
  assert.equal(sqlState('23505'), undefined);
  assert.ok(isUniqueViolation(wrapped('23505', 1)));
  assert.ok(isLockConflict(wrapped('55P03', 1)) && isLockConflict(wrapped('40P01', 0)));
  assert.ok(!isLockConflict(wrapped('23505', 0)));
});

test('a foreign key violation (a record deleted by another request meanwhile) answers 409 CONFLICT in the contract body, not a 500', async () => {
  const { PGlite } = await import('@electric-sql/pglite');
  const { drizzle } = await import('drizzle-orm/pglite');
  const { sql } = await import('drizzle-orm');
  const Fastify = (await import('fastify')).default;
  const { registerErrorHandling } = await import('../src/http/errors.plugin.js');
  const pg = new PGlite();
  const db = drizzle(pg);
  await db.execute(sql`create table parents (id text primary key)`);
  await db.execute(sql`create table children (id text primary key, parent_id text not null references parents(id) on delete cascade)`);
  await db.execute(sql`insert into parents values ('p1')`);
  const app = Fastify({ logger: false });
  registerErrorHandling(app);
  app.post('/child/:parent', async (request) => {
    const { parent } = request.params as { parent: string };
    // the route saw the parent; another request deletes it before the write
    await db.execute(sql`delete from parents where id = ${parent}`);
    await db.execute(sql`insert into children values ('c1', ${parent})`);
    return { success: true };
  });
  try {
    const res = await app.inject({ method: 'POST', url: '/child/p1' });
    assert.ok(isForeignKeyViolation(await db.execute(sql`insert into children values ('c2', 'nobody')`).catch((e: unknown) => e)));
    assert.equal(res.statusCode, 409, res.body);
    assert.equal(res.json().success, false);
    assert.equal(res.json().error.code, 'CONFLICT');
    assert.match(res.json().message, /deleted while the request was being processed/);
    assert.equal((await db.execute(sql`select count(*)::int as n from children`)).rows[0]!.n, 0);
  } finally {
    await app.close();
    await pg.close();
  }
});
