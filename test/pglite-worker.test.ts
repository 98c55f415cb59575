import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/pglite';
import { PGlite, type QueryOptions, type Transaction } from '@electric-sql/pglite';
import * as schema from '../src/db/schema.js';
import { DRIZZLE_RAW_TYPES, RawTypes } from '../src/db/raw-types.js';
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

  test("each statement's values are parsed as on this thread: drizzle's raw types raw, the rest by PGlite's parsers, whoever asks", async () => {
    // The worker's instance reads drizzle's raw types raw, so that drizzle's statements pass no parsers (a copy
    // of PGlite's whole parser table per statement: src/db/raw-types.ts). Every way of asking must still give
    // what PGlite on this thread gives: compared here value for value, rows as objects and as arrays.
    const here = await openDatabase({ pgliteDataDir: 'memory://', loadDataDir: await templateBlob() });
    try {
      assert.equal(here.worker, false);
      const text = `select timestamp '2024-01-02 03:04:05.678' as ts, timestamptz '2024-01-02 03:04:05+02' as tz,
                           interval '1 day 2 hours' as iv, date '2024-02-29' as d, 12.5::numeric as num,
                           array[1.5, 2.25]::numeric[] as nums, array[timestamp '2024-01-02 03:04:05', null]::timestamp[] as tss,
                           array[timestamptz '2024-01-02 03:04:05+00']::timestamptz[] as tzs, array[interval '1 hour'] as ivs,
                           array[date '2024-01-01', date '2025-12-31'] as ds, array[1, 2]::int[] as ints, array['a', 'b']::text[] as texts,
                           null::timestamp as nothing`;
      const identity = (v: string) => v;
      const drizzleRaw = Object.fromEntries(DRIZZLE_RAW_TYPES.map((oid) => [oid, identity]));
      const variants: Array<[string, Record<string, unknown> | undefined]> = [
        ['no options', undefined],
        ["drizzle's raw types", { parsers: drizzleRaw }],
        ["drizzle's raw types, rows as arrays", { rowMode: 'array', parsers: drizzleRaw }],
        ['timestamp alone raw', { parsers: { 1114: identity } }],
        ['timestamp[] alone raw', { rowMode: 'array', parsers: { 1115: identity } }],
        ['another parser', { parsers: { 1082: (v: string) => `date:${v}`, 25: (v: string) => v.toUpperCase() } }],
      ];
      type Queryable = { query(sql: string, params?: unknown[], options?: unknown): Promise<{ rows: unknown[] }>; exec(sql: string): Promise<Array<{ rows: unknown[] }>> };
      const worker = database.pglite as unknown as Queryable;
      const local = here.pglite as unknown as Queryable;
      for (const [name, options] of variants) {
        const expected = (await local.query(text, [], options)).rows;
        assert.deepStrictEqual((await worker.query(text, [], options)).rows, expected, name);
      }
      const parsedHere = (await local.query(text)).rows[0] as Record<string, unknown>;
      assert.ok(parsedHere.ts instanceof Date && Array.isArray(parsedHere.tss) && parsedHere.tss[0] instanceof Date, 'the comparison covers parsed values');
      assert.deepStrictEqual((await worker.exec(text))[0]!.rows, (await local.exec(text))[0]!.rows, 'exec');
      // through drizzle, as the app reads: raw text turned into the schema's values by drizzle itself
      assert.deepStrictEqual(await rowsOf(database.db, sql.raw(text)), await rowsOf(here.db, sql.raw(text)), 'drizzle');
      const [row] = await rowsOf<{ created_at: string }>(database.db, sql`select now()::timestamptz as created_at`);
      assert.equal(typeof row!.created_at, 'string', "drizzle's raw types stay text for drizzle");
    } finally {
      await here.close();
    }
  });

  test("drizzle's statements ask for exactly the raw types the worker's instance reads raw: they pass it no parsers", async () => {
    // what drizzle's PGlite driver passes with a statement, recorded on the way to the worker
    const pg = database.pglite as unknown as PGlite;
    const asked: number[][] = [];
    const recording = {
      query: (text: string, params?: unknown[], options?: QueryOptions) => {
        asked.push(Object.keys(options?.parsers ?? {}).map(Number));
        return pg.query(text, params, options);
      },
      transaction: (callback: (tx: Transaction) => Promise<unknown>) => pg.transaction(callback),
    };
    const db = drizzle(recording as unknown as PGlite, { schema });
    await db.select().from(schema.users).limit(1);
    await db.execute(sql`select now() as at`);
    assert.equal(asked.length, 2);
    for (const types of asked) assert.deepEqual([...types].sort((a, b) => a - b), [...DRIZZLE_RAW_TYPES].sort((a, b) => a - b));
    // and for that set the worker passes PGlite no parsers of its own (no copy of its parser table)
    const here = await PGlite.create();
    try {
      const raw = new RawTypes(here);
      assert.equal(raw.parsersFor(asked[0]), undefined);
      assert.notEqual(raw.parsersFor(undefined), undefined);
      assert.notEqual(raw.parsersFor([1114]), undefined);
    } finally {
      await here.close();
    }
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
