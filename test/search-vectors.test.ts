import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/pglite';
import type { PGlite } from '@electric-sql/pglite';
import * as schema from '../src/db/schema.js';
import type { FastifyBaseLogger } from 'fastify';
import { rowsOf, type Database, type Db } from '../src/db/client.js';
import { retryOnLockConflict } from '../src/db/errors.js';
import { writeIndexedChunks } from '../src/modules/search/indexing.js';
import {
  cosinesOf,
  countStagedVectors,
  denseSearch,
  drainStagedVectors,
  lockVectorTables,
  refreshUploadIndex,
  replaceChunkText,
  resultChunkRows,
  updateChunkEmbeddings,
} from '../src/modules/search/search.repository.js';
import { VectorDrain } from '../src/modules/search/vector-drain.js';
import { packVector, vectorParam } from '../src/modules/search/vectors.js';
import { insertUpload } from '../src/modules/vault/uploads.repository.js';
import { LocalEmbedder } from '../src/providers/embeddings/index.js';
import { newId } from '../src/shared/ids.js';
import { makeWorld, openTestDatabase, startTestApp } from './support/app.js';
import { seededRandom } from './support/random.js';

/**
 * How vectors are sent (binary parameters, vectors.ts) and where they live: staged by ingestion, compared
 * exactly by every search until the background drain moves them under the HNSW index.
 */
let database: Database;
let world: Awaited<ReturnType<typeof makeWorld>>;
const embedder = new LocalEmbedder(384);
/** The drain logs only its failures: a test that sees one fails. */
const log = {
  error: (obj: object, msg?: string) => {
    throw new Error(`vector drain failed: ${msg} ${JSON.stringify(obj)}`);
  },
} as unknown as FastifyBaseLogger;

before(async () => {
  database = await openTestDatabase();
  world = await makeWorld(database);
});
after(async () => {
  await database.close();
});

/** A db over the same engine that records each statement it sends, with its parameters. */
function recording(): { db: Db; sent: Array<{ query: string; params: unknown[] }> } {
  const sent: Array<{ query: string; params: unknown[] }> = [];
  const db = drizzle(database.pglite as PGlite, { schema, logger: { logQuery: (query, params) => void sent.push({ query, params }) } }) as unknown as Db;
  return { db, sent };
}

/** The index of the first statement matching `re` (and, when given, carrying `param`). */
const firstSent = (sent: ReadonlyArray<{ query: string; params: unknown[] }>, re: RegExp, param?: unknown) =>
  sent.findIndex((s) => re.test(s.query) && (param === undefined || s.params.includes(param)));

/** The vector the database stores for one sent in binary form (read back through pgvector's text form). */
async function roundTrip(v: number[]): Promise<number[]> {
  const [row] = await rowsOf<{ v: string }>(database.db, sql`select ${vectorParam(packVector(v, v.length))}::text as v`);
  return JSON.parse(row!.v) as number[];
}

/** What pgvector keeps of each component: its float32 (pgvector prints the shortest text that reads back as it). */
const float32s = (v: readonly number[]) => v.map(Math.fround);

/** Components in [−0.5, 0.5). */
const seeded = (seed: number) => {
  const r = seededRandom(seed);
  return () => r() - 0.5;
};

test('a vector sent in binary form is stored as its float32 values, whatever its magnitude', async () => {
  const r = seeded(3);
  const unit = (() => {
    const v = Array.from({ length: 384 }, r);
    const n = Math.hypot(...v);
    return v.map((x) => x / n);
  })();
  for (const [label, v] of [
    ['unit', unit],
    ['large', unit.map((x) => x * 5000)],
    ['small', unit.map((x) => x * 1e-12)],
    ['mixed', unit.map((x, i) => (i === 0 ? 3 : x * 1e-4))],
  ] as const) {
    const back = await roundTrip([...v]);
    assert.equal(back.length, 384);
    assert.deepEqual(float32s(back), float32s(v), label);
  }
  assert.deepEqual(await roundTrip(new Array(8).fill(0)), new Array(8).fill(0));
  // pgvector prints the shortest text of each float32: read back as float32, it is the same number
  assert.deepEqual(float32s(await roundTrip([-0.4, 0.4, -1, 0.25])), float32s([-0.4, 0.4, -1, 0.25]));
  // refused before the database: a wrong length, a non-finite number, a finite one beyond float32's range
  assert.throws(() => packVector([1, 2], 3), /expected 3/);
  assert.throws(() => packVector([1, Number.NaN], 2), /non-finite/);
  assert.throws(() => packVector([1, 1e39], 2), /non-finite/);
});

test('the batch writers store each vector of a batch as its float32 values, whatever the magnitudes beside it', async () => {
  const r = seeded(11);
  const unit = () => {
    const v = Array.from({ length: 384 }, r);
    const n = Math.hypot(...v);
    return v.map((x) => x / n);
  };
  // one batch, magnitudes far apart
  const cases = [unit(), unit().map((x) => x * 5000), unit().map((x) => x * 1e-12), unit().map((x, i) => (i === 0 ? 3 : x * 1e-4)), new Array<number>(384).fill(0), unit()];
  const stored = async (table: 'chunk_vectors_staged' | 'chunk_vectors', ids: string[]) => {
    const rows = await rowsOf<{ id: string; v: string }>(database.db, sql`select chunk_id as id, embedding::text as v from ${sql.raw(table)} where chunk_id = any(${`{${ids.join(',')}}`}::text[])`);
    return new Map(rows.map((row) => [row.id, JSON.parse(row.v) as number[]]));
  };
  const check = (back: Map<string, number[]>, ids: string[], expected: typeof cases, label: string) => {
    assert.equal(back.size, ids.length);
    ids.forEach((chunkId, k) => {
      assert.deepEqual(float32s(back.get(chunkId)!), float32s(expected[k]!), `${label} row ${k}`);
    });
  };
  const id = newId();
  await insertUpload(database.db, { id, originalname: 'f.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: world.userA1.id, accountId: world.accountA.id, status: 'processing', storageKey: id, sha256: id });
  const ids = cases.map(() => newId());
  const texts = cases.map((_, k) => `chunk ${k}`);
  await writeIndexedChunks(database.db, id, cases.map((v, k) => ({ id: ids[k]!, index: k, text: texts[k]!, heading: null, tokens: 2, embedding: packVector(v, 384) })), new Date());
  check(await stored('chunk_vectors_staged', ids), ids, cases, 'staged');
  // a re-embed's writer, with the vectors in the reverse order of magnitudes
  const reversed = [...cases].reverse();
  await updateChunkEmbeddings(database.db, ids.map((chunkId, k) => ({ id: chunkId, text: texts[k]!, embedding: packVector(reversed[k]!, 384) })));
  check(await stored('chunk_vectors', ids), ids, reversed, 're-embedded');
  await database.db.execute(sql`delete from uploads where id = ${id}`);
});

test("the chunk writer parses each chunk's text once: the tsvector and its BM25 length come from one to_tsvector call", async () => {
  const { db, sent } = recording();
  const id = newId();
  await insertUpload(database.db, { id, originalname: 'f.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: world.userA1.id, accountId: world.accountA.id, status: 'processing', storageKey: id, sha256: id });
  const vectors = await embedder.embed(['first chunk of text', 'second chunk of text']);
  await writeIndexedChunks(db, id, vectors.map((v, i) => ({ id: newId(), index: i, text: `chunk ${i} of text`, heading: null, tokens: 4, embedding: packVector(v, 384) })), new Date());
  const insert = sent.find((q) => /insert into chunks/i.test(q.query))!;
  // the plan of that statement, with its parameters: one to_tsvector per row, not one per use of its result
  const pg = database.pglite as PGlite;
  await pg.query('begin');
  try {
    const plan = (await pg.query<{ 'QUERY PLAN': string }>(`explain (verbose, costs off) ${insert.query}`, insert.params as unknown[])).rows.map((r) => r['QUERY PLAN']).join('\n');
    // a call evaluated: written bare, or as unnest's argument; a reference to a computed result is written in parentheses
    assert.equal(plan.match(/(?<![(])to_tsvector\(|unnest\(to_tsvector\(/g)?.length, 1, plan);
  } finally {
    await pg.query('rollback');
  }
  const [row] = await rowsOf<{ n: number; lex: number }>(database.db, sql`select count(*)::int as n, sum(lex_len)::int as lex from chunks where upload_id = ${id}`);
  assert.deepEqual(row, { n: 2, lex: 6 }, "'chunk', the digit and 'text' of each ('of' is a stop word)");
  await database.db.execute(sql`delete from uploads where id = ${id}`);
});

test("packing writes pgvector's binary form: dimensions, a zero, big-endian float32 components", () => {
  assert.throws(() => packVector([1, 2], 3), /2 numbers, expected 3/);
  assert.throws(() => packVector([1, Number.POSITIVE_INFINITY, 2], 3), /non-finite/);
  const packed = packVector([0.5, -0.25, 0], 3);
  assert.deepEqual([...packed], [0, 3, 0, 0, 0x3f, 0, 0, 0, 0xbe, 0x80, 0, 0, 0, 0, 0, 0]);
  // its own memory (not a slice of Buffer's pool): what crosses to the database's worker thread is the vector alone
  assert.equal(packed.buffer.byteLength, 16);
});

async function addUpload(texts: string[]): Promise<{ id: string; chunkIds: string[] }> {
  const db = database.db;
  const id = newId();
  await insertUpload(db, { id, originalname: 'f.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: world.userA1.id, accountId: world.accountA.id, status: 'processing', storageKey: id, sha256: id });
  const vectors = await embedder.embed(texts);
  const chunkIds = texts.map(() => newId());
  await writeIndexedChunks(
    db,
    id,
    texts.map((text, i) => ({ id: chunkIds[i]!, index: i, text, heading: null, tokens: 10, embedding: packVector(vectors[i]!, 384) })),
    new Date(),
  );
  await refreshUploadIndex(db, id);
  await db.execute(sql`update uploads set status = 'active' where id = ${id}`);
  return { id, chunkIds };
}

const counts = async (uploadId: string) =>
  (
    await rowsOf<{ staged: number; indexed: number }>(
      database.db,
      sql`select (select count(*)::int from chunk_vectors_staged where upload_id = ${uploadId}) as staged,
                 (select count(*)::int from chunk_vectors where upload_id = ${uploadId}) as indexed`,
    )
  )[0]!;

const TOPICS = 'boundary layer shock wave flutter heat transfer cone wing panel buckling pressure plateau separation nozzle jet'.split(' ');
const texts = (n: number, seed: number) => Array.from({ length: n }, (_, i) => `${TOPICS[(i * 7 + seed) % TOPICS.length]} ${TOPICS[(i * 3 + seed) % TOPICS.length]} ${TOPICS[(i * 5 + seed) % TOPICS.length]} ${i}`);

test('ingested vectors are staged, found by both dense paths before and after the drain, with the same scores', async () => {
  const file = await addUpload(texts(40, 1));
  assert.deepEqual(await counts(file.id), { staged: 40, indexed: 0 });
  const [q] = await embedder.embed(['shock wave boundary layer']);
  const vector = packVector(q!, 384);
  const scope = sql`u.id = ${file.id}`;
  const before = { exact: await denseSearch(database.db, scope, vector, 10, true), index: await denseSearch(database.db, scope, vector, 10, false) };
  assert.equal(before.exact.length, 10);
  assert.deepEqual(before.index, before.exact);

  // the drain moves them in batches, oldest chunk ids first, and reports how many left the staging table
  let moved = 0;
  for (let n = await drainStagedVectors(database.db, 16); n > 0; n = await drainStagedVectors(database.db, 16)) {
    assert.ok(n <= 16);
    moved += n;
  }
  assert.ok(moved >= 40); // other tests' files may be drained here too
  assert.deepEqual(await counts(file.id), { staged: 0, indexed: 40 });
  const afterExact = await denseSearch(database.db, scope, vector, 10, true);
  const afterIndex = await denseSearch(database.db, scope, vector, 10, false);
  assert.deepEqual(afterExact, before.exact);
  assert.deepEqual(
    afterIndex.map((r) => r.id),
    before.exact.map((r) => r.id),
  );
});

test('a search merges indexed and staged vectors of its scope into one top-k', async () => {
  const indexed = await addUpload(texts(30, 2));
  while ((await drainStagedVectors(database.db, 100)) > 0);
  const staged = await addUpload(texts(30, 3));
  assert.deepEqual(await counts(staged.id), { staged: 30, indexed: 0 });
  const [q] = await embedder.embed(['flutter of a wing panel']);
  const vector = packVector(q!, 384);
  const scope = sql`u.id in (${indexed.id}, ${staged.id})`;
  const index = await denseSearch(database.db, scope, vector, 20, false);
  const exact = await denseSearch(database.db, scope, vector, 20, true);
  assert.equal(index.length, 20);
  assert.deepEqual(index, exact);
  assert.ok(index.some((r) => indexed.chunkIds.includes(r.id)) && index.some((r) => staged.chunkIds.includes(r.id)), 'both files among the top 20');
  // sorted by score, best first
  for (let i = 1; i < index.length; i++) assert.ok(index[i - 1]!.score >= index[i]!.score);
});

test('the drain keeps a vector written to the index meanwhile, and deleting a file removes its vectors wherever they are', async () => {
  const file = await addUpload(texts(3, 4));
  const target = file.chunkIds[0]!;
  const newer = packVector(Array.from({ length: 384 }, (_, i) => (i === 7 ? 1 : 0)), 384);
  // what a chunk edit or a re-embed does: the new vector goes straight to chunk_vectors
  await database.db.execute(sql`insert into chunk_vectors (chunk_id, upload_id, embedding) values (${target}, ${file.id}, ${vectorParam(newer)})`);
  while ((await drainStagedVectors(database.db, 100)) > 0);
  const [kept] = await rowsOf<{ v: string }>(database.db, sql`select embedding::text as v from chunk_vectors where chunk_id = ${target}`);
  assert.equal((JSON.parse(kept!.v) as number[])[7], 1);
  assert.deepEqual(await counts(file.id), { staged: 0, indexed: 3 });

  const other = await addUpload(texts(5, 5));
  await database.db.execute(sql`delete from uploads where id in (${file.id}, ${other.id})`);
  assert.deepEqual(await counts(file.id), { staged: 0, indexed: 0 });
  assert.deepEqual(await counts(other.id), { staged: 0, indexed: 0 });
});

const until = async (what: () => Promise<boolean>, ms = 20_000) => {
  const end = Date.now() + ms;
  while (!(await what())) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 25));
  }
  return true;
};

test('the background drain empties the staging table, waits while an ingestion holds it, and drains beyond its backlog cap', async () => {
  while ((await drainStagedVectors(database.db, 1000)) > 0);
  const drain = new VectorDrain(database.db, log, { batch: 4, idleMs: 20, backlogCap: 1000, vacuum: true });
  const release = drain.hold();
  drain.start();
  try {
    const file = await addUpload(texts(25, 6));
    // held, and 25 staged is under the cap: nothing moves however long it waits (the hold is checked before
    // every batch; a drain that ignored it would have moved all 25 within a few batches of 4)
    await new Promise((r) => setTimeout(r, 400));
    assert.deepEqual(await counts(file.id), { staged: 25, indexed: 0 });
    release();
    assert.ok(await until(async () => (await countStagedVectors(database.db)) === 0), 'drained after the hold was released');
    assert.deepEqual(await counts(file.id), { staged: 0, indexed: 25 });
    assert.equal(drain.moved, 25);
  } finally {
    await drain.stop();
  }

  const capped = new VectorDrain(database.db, log, { batch: 4, idleMs: 20, backlogCap: 10, vacuum: true });
  const hold = capped.hold();
  capped.start();
  try {
    const file = await addUpload(texts(25, 7));
    // held, but 25 staged is over the cap of 10: it drains down to the cap and waits there
    assert.ok(await until(async () => (await countStagedVectors(database.db)) < 10), 'drained below the cap while held');
    await new Promise((r) => setTimeout(r, 300));
    // batches of 4 from 25: 21, 17, 13, 9, and at 9 (under the cap) it waits
    assert.deepEqual(await counts(file.id), { staged: 9, indexed: 16 });
    hold();
    assert.ok(await until(async () => (await countStagedVectors(database.db)) === 0));
  } finally {
    await capped.stop();
  }
});

test("on the embedded engine the app's statements are its activity and the drain's are not", async () => {
  const background = database.background;
  assert.ok(background, 'PGlite has a background handle');
  // a statement of the app is activity from the moment it is sent until it ends (a transaction, its whole length)
  let inside = Number.NaN;
  await database.db.transaction(async (tx) => {
    await tx.execute(sql`select 1`);
    inside = background.activity.quietFor();
  });
  assert.equal(inside, 0);
  assert.ok(background.activity.quietFor() > 0);
  // the background handle's statements are not: the engine's quiet time goes on growing through them
  const before = background.activity.quietFor();
  await background.db.execute(sql`select count(*) from chunk_vectors_staged`);
  assert.ok(background.activity.quietFor() > before);
});

test('the drain gives way to the app: nothing moves while the app uses the engine, until it has been left alone, or the longest wait is over', async () => {
  const { db: bg, activity } = database.background!;
  while ((await drainStagedVectors(bg, 1000)) > 0);
  // polled through the background handle: polling through the app's would itself be activity
  const staged = async () => (await countStagedVectors(bg)) === 0;
  let endBusy!: () => void;
  // the app holds the engine (a long operation in flight) until released
  const busy = activity.track(new Promise<void>((resolve) => (endBusy = resolve)));
  const file = await addUpload(texts(12, 8));
  const drain = new VectorDrain(bg, log, { batch: 4, idleMs: 20, backlogCap: 1000, vacuum: false, giveWay: { activity, quietMs: 50, maxWaitMs: 60_000 } });
  drain.start();
  try {
    // a drain that did not give way would have moved all 12 within a few batches of 4
    await new Promise((r) => setTimeout(r, 400));
    assert.deepEqual(await counts(file.id), { staged: 12, indexed: 0 });
    assert.ok(drain.yielded > 0);
    endBusy();
    await busy;
    assert.ok(await until(staged), 'drained once the app left the engine alone');
    assert.equal(drain.moved, 12);
  } finally {
    endBusy();
    await drain.stop();
  }

  // under a load that never stops, a batch still goes every maxWaitMs
  const steady = activity.track(new Promise<void>((resolve) => (endBusy = resolve)));
  const second = await addUpload(texts(8, 9));
  const patient = new VectorDrain(bg, log, { batch: 4, idleMs: 20, backlogCap: 1000, vacuum: false, giveWay: { activity, quietMs: 50, maxWaitMs: 100 } });
  patient.start();
  try {
    assert.ok(await until(staged), 'drained under a steady load');
    assert.deepEqual(await counts(second.id), { staged: 0, indexed: 8 });
    assert.ok(patient.yielded > 0);
  } finally {
    endBusy();
    await steady;
    await patient.stop();
  }
});

test('with a lock timeout (PostgreSQL) each batch bounds its wait in its own transaction, and a lock conflict makes the drain wait, not fail', async () => {
  while ((await drainStagedVectors(database.db, 1000)) > 0);
  const file = await addUpload(texts(6, 10));
  const rec = recording();
  assert.equal(await drainStagedVectors(rec.db, 2, { lockTimeoutMs: 300 }), 2);
  // the bound is set in the batch's transaction before the statement that takes the tables, and for it only
  const bound = firstSent(rec.sent, /set_config\('lock_timeout'/, '300ms');
  assert.ok(bound >= 0 && bound < firstSent(rec.sent, /with taken as/), JSON.stringify(rec.sent));
  assert.equal((await rowsOf<{ t: string }>(database.db, sql`select current_setting('lock_timeout') as t`))[0]!.t, '0');
  // PGlite cannot hold a lock against itself: the conflict is what PostgreSQL would raise, from the first batch
  let conflicts = 1;
  const busy = new Proxy(database.db, {
    get(target, key, receiver) {
      if (key === 'transaction' && conflicts > 0) {
        return async () => {
          conflicts--;
          throw Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03' });
        };
      }
      return Reflect.get(target, key, receiver) as unknown;
    },
  });
  const infos: string[] = [];
  const drain = new VectorDrain(busy, { ...log, info: (_obj: object, msg?: string) => void infos.push(msg ?? '') } as unknown as FastifyBaseLogger, {
    batch: 4,
    idleMs: 20,
    backlogCap: 1000,
    vacuum: false,
    lockTimeoutMs: 300,
  });
  drain.start();
  try {
    // the test's logger throws on an error: a conflict reported as a failure would not reach this point
    assert.ok(await until(async () => (await counts(file.id)).staged === 0), 'drained after the conflict');
    assert.deepEqual(infos, ['the vector tables are busy; moving staged vectors later']);
  } finally {
    await drain.stop();
  }
});

test('a chunk edit takes the chunk out of the staging table and writes its new vector under the index', async () => {
  const file = await addUpload(texts(3, 8));
  assert.deepEqual(await counts(file.id), { staged: 3, indexed: 0 });
  const newer = packVector(Array.from({ length: 384 }, (_, i) => (i === 3 ? 1 : 0)), 384);
  await database.db.transaction((tx) => replaceChunkText(tx, file.chunkIds[1]!, 'edited text', 2, newer, [], new Date()));
  assert.deepEqual(await counts(file.id), { staged: 2, indexed: 1 });
  const [row] = await rowsOf<{ id: string; v: string }>(database.db, sql`select chunk_id as id, embedding::text as v from chunk_vectors where upload_id = ${file.id}`);
  assert.equal(row!.id, file.chunkIds[1]);
  assert.equal((JSON.parse(row!.v) as number[])[3], 1);
  await database.db.execute(sql`delete from uploads where id = ${file.id}`);
});

test('/metrics reports the staged vectors (search_vectors_staged)', async () => {
  const t = await startTestApp();
  try {
    // the app's own drain would move them while this looks
    await t.app.ctx.vectorDrain.stop();
    const staged = async () => {
      const res = await t.app.inject({ method: 'GET', url: '/metrics' });
      assert.equal(res.statusCode, 200);
      const found = /^search_vectors_staged (\d+)$/m.exec(res.body);
      assert.ok(found, 'the gauge is exported');
      return Number(found[1]);
    };
    const before = await staged();
    const w = await makeWorld(t.database);
    const id = newId();
    await insertUpload(t.database.db, { id, originalname: 'm.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: w.userA1.id, accountId: w.accountA.id, status: 'processing', storageKey: id, sha256: id });
    const vectors = await embedder.embed(texts(7, 9));
    await writeIndexedChunks(t.database.db, id, texts(7, 9).map((text, i) => ({ id: newId(), index: i, text, heading: null, tokens: 4, embedding: packVector(vectors[i]!, 384) })), new Date());
    assert.equal(await staged(), before + 7);
  } finally {
    await t.close();
  }
});

test('every statement that reads or writes both vector tables names chunk_vectors_staged first (the order of their locks on PostgreSQL)', async () => {
  // PostgreSQL locks a statement's tables as it reads them, in the order they appear. A re-embed locks
  // both tables (staged, then chunk_vectors) and the drain takes them in that order too: a search that took
  // chunk_vectors first could wait for the re-embed while holding what the re-embed waits for (a deadlock,
  // answered with a 500). PGlite runs one statement at a time and cannot show the deadlock; this test
  // checks the order itself, in the SQL each function sends.
  const { db: logged, sent: recorded } = recording();
  const file = await addUpload(texts(3, 9));
  const [q] = await embedder.embed(['nozzle jet']);
  const vector = packVector(q!, 384);
  const scope = sql`u.id = ${file.id}`;
  await denseSearch(logged, scope, vector, 5, true);
  await denseSearch(logged, scope, vector, 5, false);
  await cosinesOf(logged, file.chunkIds, vector);
  await resultChunkRows(logged, file.chunkIds, vector);
  await updateChunkEmbeddings(logged, [{ id: file.chunkIds[0]!, text: texts(3, 9)[0]!, embedding: vector }]);
  await drainStagedVectors(logged, 100);
  const sent = recorded.map((s) => s.query);
  const both = sent.filter((text) => /chunk_vectors_staged/.test(text) && /chunk_vectors(?!_staged)/.test(text));
  assert.equal(both.length, 6, sent.join('\n---\n'));
  // the tables' first appearance after FROM, JOIN, INTO or UPDATE (a name in the select list takes no lock)
  const tableAt = (text: string, table: string) => text.search(new RegExp(`\\b(?:from|join|into|update)\\s+"?${table}"?(?![_a-z])`, 'i'));
  for (const text of both) {
    const staged = tableAt(text, 'chunk_vectors_staged');
    const indexed = tableAt(text, 'chunk_vectors');
    assert.ok(staged >= 0 && indexed >= 0 && staged < indexed, text);
  }
});

test("a re-embed writes a vector only for the text it read: a chunk edited meanwhile keeps its edit's vector; a staged one leaves the staging table", async () => {
  const file = await addUpload(texts(2, 11));
  const [edited, staged] = file.chunkIds as [string, string];
  const original = texts(2, 11);
  const [other, newText] = await embedder.embed(['a quite different sentence about turbulence', 'the edited text of the chunk']);
  const stored = async (id: string) => (await rowsOf<{ v: string }>(database.db, sql`select embedding::text as v from chunk_vectors where chunk_id = ${id}`))[0]?.v;
  // the first chunk is edited after the re-embed read it
  await database.db.transaction((tx) => replaceChunkText(tx, edited, 'the edited text of the chunk', 6, packVector(newText!, 384), [], new Date()));
  const afterEdit = await stored(edited);
  assert.ok(afterEdit);
  await updateChunkEmbeddings(database.db, [
    { id: edited, text: original[0]!, embedding: packVector(other!, 384) },
    { id: staged, text: original[1]!, embedding: packVector(other!, 384) },
  ]);
  assert.equal(await stored(edited), afterEdit, "the edit's vector stays");
  // the second chunk's text is the one read: its vector replaces the staged one, in the index table
  assert.deepEqual(await counts(file.id), { staged: 0, indexed: 2 });
  assert.equal(await stored(staged), (await rowsOf<{ v: string }>(database.db, sql`select ${vectorParam(packVector(other!, 384))}::text as v`))[0]!.v);
});

test('locking the vector tables waits a bounded time and restores lock_timeout; a lock conflict is tried again, any other error is not', async () => {
  await database.db.execute(sql`set lock_timeout = '7s'`);
  try {
    const rec = recording();
    const seen = await rec.db.transaction(async (tx) => {
      await lockVectorTables(tx);
      return (await rowsOf<{ t: string }>(tx, sql`select current_setting('lock_timeout') as t`))[0]!.t;
    });
    // bounded while the tables are locked, restored after
    const bound = firstSent(rec.sent, /set_config\('lock_timeout'/, '500ms');
    assert.ok(bound >= 0 && bound < firstSent(rec.sent, /lock table chunk_vectors_staged, chunk_vectors/), JSON.stringify(rec.sent));
    assert.equal(seen, '7s');
  } finally {
    await database.db.execute(sql`reset lock_timeout`);
  }
  // 55P03 (lock_timeout) and 40P01 (deadlock), as the driver reports them directly or wrapped by drizzle
  const failing = (codes: string[]) => {
    let calls = 0;
    return {
      run: async () => {
        const code = codes[calls++];
        if (code) throw Object.assign(new Error('failed query'), { cause: Object.assign(new Error(code), { code }) });
        return calls;
      },
      calls: () => calls,
    };
  };
  const conflicts = failing(['55P03', '40P01']);
  assert.equal(await retryOnLockConflict(conflicts.run), 3);
  const other = failing(['23505']);
  await assert.rejects(retryOnLockConflict(other.run), /failed query/);
  assert.equal(other.calls(), 1);
  const always = failing(['55P03', '55P03', '55P03']);
  await assert.rejects(retryOnLockConflict(always.run, { attempts: 3 }), /failed query/);
  assert.equal(always.calls(), 3);
});
