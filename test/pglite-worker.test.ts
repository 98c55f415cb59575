import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { openDatabase, type Database } from '../src/db/client.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { templateBlob } from './support/template.js';
import { packVector, vectorParam } from '../src/modules/search/vectors.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * The embedded database in a worker thread (PGLITE_WORKER, the default outside tests) behind the
 * same driver interface: the app runs unchanged on it, errors keep their Postgres fields,
 * transactions commit and roll back, and the request loop keeps running while a statement does.
 */
describe('PGlite in a worker thread', () => {
  let database: Database;
  let t: TestApp;

  before(async () => {
    database = await openDatabase({ pgliteDataDir: 'memory://', loadDataDir: await templateBlob(), pgliteWorker: true });
    t = await startTestApp({ database });
  });
  after(async () => {
    await t?.close();
    await database?.close();
  });

  test('the app works on it: login, me, an admin write, an upload ingested to active', async () => {
    assert.equal(database.worker, true);
    const w = await makeWorld(database);
    const { accessToken } = await login(t.app, w.userA1.email);
    const me = await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) });
    assert.equal(me.statusCode, 200);
    assert.equal(me.json().data._id, w.userA1.id);
    assert.equal(me.json().data.created, w.userA1.createdAt.toISOString(), 'timestamps parsed as on the main thread');

    const root = (await login(t.app, w.superadmin.email)).accessToken;
    const dup = await t.app.inject({
      method: 'POST',
      url: '/api/admin/user',
      headers: bearer(root),
      payload: { email: w.userA1.email, password: 'long enough pw', fname: 'A', lname: 'B', account: w.accountA.id, institutions: [] },
    });
    assert.equal(dup.statusCode, 409);

    const file = await uploadOk(t.app, accessToken, { name: 'notes.md', content: '# Optics\n\nLight bends in water.\n\n## Lenses\n\nA lens focuses light.' });
    const done = await waitForIngestion(t.app, accessToken, file._id);
    assert.equal(done.status, 'active');
    const chunks = await t.app.inject({ method: 'GET', url: `/api/user/files/${file._id}/chunks`, headers: bearer(accessToken) });
    assert.equal(chunks.statusCode, 200);
    assert.ok(chunks.json().data.length > 0);
  });

  test("a vector crosses to the worker as bytes and is read by pgvector's receive function (a binary parameter)", async () => {
    const v = [0.1, -2.5e-7, 3e5, 0];
    const [row] = await rowsOf<{ v: string }>(database.db, sql`select ${vectorParam(packVector(v, 4))}::text as v`);
    assert.deepEqual((JSON.parse(row!.v) as number[]).map(Math.fround), v.map(Math.fround));
    // any other parameter of a type without a serializer is still sent as text
    const [t] = await rowsOf<{ v: string }>(database.db, sql`select ${'[1,2]'}::vector::text as v`);
    assert.equal(t!.v, '[1,2]');
  });

  test('a transaction commits or rolls back as a whole; errors keep code and constraint', async () => {
    await database.db.execute(sql`create table worker_probe (id int primary key, note text)`);
    await assert.rejects(
      database.db.transaction(async (tx) => {
        await tx.execute(sql`insert into worker_probe values (1, 'a')`);
        throw new Error('abort');
      }),
      /abort/,
    );
    assert.equal((await rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from worker_probe`))[0]!.n, 0);
    await database.db.transaction(async (tx) => {
      await tx.execute(sql`insert into worker_probe values (1, 'a')`);
      await tx.execute(sql`insert into worker_probe values (2, 'b')`);
    });
    const err = await database.db.execute(sql`insert into worker_probe values (1, 'again')`).then(
      () => assert.fail('duplicate accepted'),
      (e: { cause?: { code?: string; constraint?: string } }) => e,
    );
    assert.equal(err.cause?.code, '23505');
    assert.equal(err.cause?.constraint, 'worker_probe_pkey');
    assert.equal((await rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from worker_probe`))[0]!.n, 2);
  });

  test('a statement outside an open transaction waits for it, then sees its commit', async () => {
    await database.db.execute(sql`create table worker_order (id int)`);
    let releaseTx!: () => void;
    const gate = new Promise<void>((r) => (releaseTx = r));
    let inserted!: () => void;
    const insertedSignal = new Promise<void>((r) => (inserted = r));
    const tx = database.db.transaction(async (trx) => {
      await trx.execute(sql`insert into worker_order values (1)`);
      inserted();
      await gate;
      await trx.execute(sql`insert into worker_order values (2)`);
    });
    await insertedSignal;
    let readDone = false;
    const read = rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from worker_order`).then((rows) => ((readDone = true), rows));
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(readDone, false, 'the outside read waits for the transaction');
    releaseTx();
    await tx;
    assert.equal((await read)[0]!.n, 2);
  });

  test('the request loop runs while a long statement runs in the worker', async () => {
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    let ticksWhenDone = -1;
    try {
      await database.db.execute(sql`select count(*) from generate_series(1, 3000000)`).then(() => (ticksWhenDone = ticks));
    } finally {
      clearInterval(timer);
    }
    // on the main thread no timer can fire while PGlite runs a statement (it is synchronous there)
    assert.ok(ticksWhenDone > 0, `timers fired during the statement (${ticksWhenDone})`);
  });
});
