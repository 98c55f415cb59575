import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { rowsOf, type Db } from '../src/db/client.js';
import { enqueue, Worker, type Job } from '../src/platform/jobs.js';
import { LocalEmbedder } from '../src/providers/embeddings/index.js';
import type { Embedder } from '../src/providers/embeddings/types.js';
import { ManualClock } from '../src/shared/clock.js';
import { EMBEDDER_CHANGED_MESSAGE, INGEST_MAX_ATTEMPTS, STAGED_BATCH_ROWS } from '../src/modules/vault/ingest/pipeline.js';
import { checkEmbedder, reembedAll } from '../src/modules/vault/ingest/reembed.js';
import { embeddingColumnDimensions, readEmbedderState } from '../src/modules/search/search.repository.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeWorld, openTestDatabase, startTestApp, testConfig, type TestApp } from './support/app.js';
import { makeDocx, makePdf, uploadOk, waitForIngestion } from './support/uploads.js';

const silentLog = { info() {}, warn() {}, error() {} };

/** The real local embedder, counting calls and able to fail on demand. */
class ProbeEmbedder implements Embedder {
  readonly inner: LocalEmbedder;
  readonly id: string;
  readonly dimensions: number;
  batches: number[] = [];
  failures = 0;
  /** runs inside every embed call (to change the world mid-ingestion) */
  onEmbed: (() => Promise<void>) | null = null;
  constructor(dimensions = 384) {
    this.inner = new LocalEmbedder(dimensions);
    this.id = this.inner.id;
    this.dimensions = dimensions;
  }
  async embed(texts: string[], options?: { signal?: AbortSignal }) {
    this.batches.push(texts.length);
    if (this.onEmbed) await this.onEmbed();
    if (this.failures > 0) {
      this.failures--;
      throw new Error('provider down (test)');
    }
    return this.inner.embed(texts, options);
  }
}

async function chunkRows(db: Db, uploadId: string) {
  return rowsOf<{ chunk_index: number; text: string; tokens: number; dims: number; has_tsv: boolean }>(
    db,
    sql`select c.chunk_index, c.text, c.tokens, vector_dims(coalesce(v.embedding, s.embedding)) as dims, c.tsv is not null as has_tsv
          from chunks c left join chunk_vectors v on v.chunk_id = c.id left join chunk_vectors_staged s on s.chunk_id = c.id
         where c.upload_id = ${uploadId} order by c.chunk_index`,
  );
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function jobOf(db: Db, uploadId: string) {
  const [job] = await rowsOf<{ status: string; attempts: number; last_error: string | null }>(
    db,
    sql`select status, attempts, last_error from jobs where payload->>'uploadId' = ${uploadId}`,
  );
  return job;
}

describe('vault ingestion: every format through HTTP and the real pipeline', () => {
  let t: TestApp;
  let world: Awaited<ReturnType<typeof makeWorld>>;
  let token: string;
  const probe = new ProbeEmbedder();

  before(async () => {
    t = await startTestApp({ env: { EMBEDDINGS_BATCH_SIZE: '16' }, build: { providers: { embedder: probe } } });
    world = await makeWorld(t.database);
    token = (await login(t.app, world.userA1.email)).accessToken;
  });
  after(() => t.close());

  const cases: Array<{ name: string; type: string; make: () => Promise<Buffer | string>; expect: string[]; pages?: number }> = [
    {
      name: 'notes.txt',
      type: 'text/plain',
      make: async () => 'The axolotl regenerates its limbs.\n\nIt lives in lake Xochimilco near Mexico City.',
      expect: ['axolotl regenerates its limbs', 'Xochimilco'],
    },
    {
      name: 'guide.md',
      type: 'text/markdown',
      make: async () => '# Pangolin guide\n\nThe pangolin is covered in keratin scales.\n\n## Diet\n\nAnts and termites.',
      expect: ['pangolin is covered in keratin scales', 'termites'],
    },
    {
      name: 'animals.csv',
      type: 'text/csv',
      make: async () => 'name,habitat\nquokka,Rottnest Island\nnarwhal,Arctic ocean\n',
      expect: ['quokka', 'Rottnest Island', 'narwhal'],
    },
    {
      name: 'facts.json',
      type: 'application/json',
      make: async () => JSON.stringify({ animal: { name: 'okapi', relative: 'giraffe' }, tags: ['forest', 'Congo'] }),
      expect: ['okapi', 'giraffe', 'Congo'],
    },
    {
      name: 'page.html',
      type: 'text/html',
      make: async () =>
        '<html><head><title>t</title><script>var secretScript = 1;</script></head><body><h1>Tardigrades</h1><p>Tardigrades survive the vacuum of space.</p></body></html>',
      expect: ['Tardigrades survive the vacuum of space'],
    },
    {
      name: 'report.pdf',
      type: 'application/pdf',
      make: () => makePdf(['The capybara is the largest living rodent.', 'Capybaras are semiaquatic mammals.', 'They live in South America.']),
      expect: ['capybara is the largest living rodent', 'semiaquatic', 'South America'],
      pages: 3,
    },
    {
      name: 'memo.docx',
      type: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
      make: () => makeDocx('Platypus memo', ['The platypus lays eggs.', 'Males have venomous spurs.']),
      expect: ['platypus lays eggs', 'venomous spurs'],
    },
  ];

  for (const c of cases) {
    test(`${c.name} becomes active with its text in indexed, embedded chunks`, async () => {
      const created = await uploadOk(t.app, token, { name: c.name, type: c.type, content: await c.make() });
      assert.equal(created.status, 'processing');
      const done = await waitForIngestion(t.app, token, created._id);
      assert.equal(done.status, 'active', done.error_message);
      assert.ok(done.chunkCount > 0);
      assert.equal(done.progress, 100);
      assert.equal(done.stage, 'done');
      assert.equal(done.error_message, null);
      if (c.pages) assert.equal(done.pages, c.pages);
      const rows = await chunkRows(t.database.db, created._id);
      assert.equal(rows.length, done.chunkCount);
      const all = rows.map((r) => r.text).join('\n');
      for (const phrase of c.expect) assert.ok(all.includes(phrase), `chunks of ${c.name} lack "${phrase}": ${all}`);
      for (const r of rows) {
        assert.equal(r.dims, 384);
        assert.equal(r.has_tsv, true);
        assert.ok(r.tokens > 0);
      }
      const [meta] = await rowsOf<{ embedding_model: string; text_tokens: number }>(t.database.db, sql`select embedding_model, text_tokens from uploads where id = ${created._id}`);
      assert.equal(meta!.embedding_model, probe.id);
      assert.equal(meta!.text_tokens, rows.reduce((n, r) => n + r.tokens, 0));
    });
  }

  test('html: scripts are not indexed; lexical index answers a word of the text', async () => {
    const created = await uploadOk(t.app, token, { name: 'x.html', type: 'text/html', content: '<p>Hoatzin chicks have wing claws.</p><script>var hiddenzyx = 1</script>' });
    await waitForIngestion(t.app, token, created._id);
    const [hit] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from chunks where upload_id = ${created._id} and tsv @@ plainto_tsquery('english', 'hoatzin claws')`);
    assert.equal(hit!.n, 1);
    const [miss] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from chunks where upload_id = ${created._id} and text like '%hiddenzyx%'`);
    assert.equal(miss!.n, 0);
  });

  test('a corrupt PDF ends in error with a readable error_message and no chunks', async () => {
    const created = await uploadOk(t.app, token, { name: 'broken.pdf', type: 'application/pdf', content: Buffer.from('%PDF-1.7\n1 0 obj garbage that is not a pdf\n%%EOF') });
    const done = await waitForIngestion(t.app, token, created._id);
    assert.equal(done.status, 'error');
    assert.match(done.error_message, /^Could not read PDF/);
    assert.equal(done.chunkCount, 0);
    assert.equal((await chunkRows(t.database.db, created._id)).length, 0);
  });

  test('a text file with no text ends in error', async () => {
    const created = await uploadOk(t.app, token, { name: 'blank.txt', type: 'text/plain', content: '   \n\n  \t ' });
    const done = await waitForIngestion(t.app, token, created._id);
    assert.equal(done.status, 'error');
    assert.equal(done.error_message, 'File contains no text');
  });

  test('a parse error that quotes a NUL byte ends in error at once with its reason (the NUL is not stored), not after lost leases', async () => {
    // V8's JSON.parse error quotes the text, NUL included; Postgres refuses a NUL in text
    const created = await uploadOk(t.app, token, { name: 'nul.json', type: 'application/json', content: Buffer.from('{"a":\u0000 1}', 'utf8') });
    const done = await waitForIngestion(t.app, token, created._id, 20_000);
    assert.equal(done.status, 'error', `status ${done.status}: ${done.error_message}`);
    assert.match(String(done.error_message), /^Invalid JSON: .*is not valid JSON/, `error_message: ${JSON.stringify(done.error_message)}`);
    assert.equal(String(done.error_message).includes('\u0000'), false, 'no NUL in the stored message');
    const job = await jobOf(t.database.db, created._id);
    assert.deepEqual(job && { status: job.status, attempts: job.attempts }, { status: 'done', attempts: 1 }, `the job ended on its first attempt: ${JSON.stringify(job)}`);
  });

  test('a long document: embedded in batches of EMBEDDINGS_BATCH_SIZE, written over several multi-row inserts, indexes contiguous', async () => {
    const paragraphs = Array.from({ length: 4000 }, (_, i) => `Paragraph ${i} tells of the wandering albatross number ${i}, which glides for hours over the southern ocean without a single wing beat.`);
    probe.batches = [];
    const created = await uploadOk(t.app, token, { name: 'long.txt', type: 'text/plain', content: paragraphs.join('\n\n') });
    const done = await waitForIngestion(t.app, token, created._id, 60_000);
    assert.equal(done.status, 'active', done.error_message);
    assert.ok(done.chunkCount > 200, `expected more than one insert batch of 200, got ${done.chunkCount} chunks`);
    assert.ok(probe.batches.length >= Math.ceil(done.chunkCount / 16));
    assert.ok(probe.batches.every((n) => n <= 16), `batches: ${probe.batches.join(',')}`);
    const rows = await chunkRows(t.database.db, created._id);
    assert.deepEqual(
      rows.map((r) => r.chunk_index),
      rows.map((_, i) => i),
    );
    const all = rows.map((r) => r.text).join('\n');
    assert.ok(all.includes('albatross number 0,') && all.includes('albatross number 3999,'));
  });

  test('a large file whose final check fails leaves no staged chunk behind', async () => {
    const paragraphs = Array.from({ length: 6000 }, (_, i) => `Note ${i}: the secretary bird stamps on snakes with a force of five times its weight.`);
    // between the first check and the final transaction, another model takes over the stored vectors
    probe.onEmbed = async () => {
      probe.onEmbed = null;
      await t.database.db.execute(sql`update system_state set value = '{"id":"other-model","dimensions":384,"complete":true}'::jsonb where key = 'embedder'`);
    };
    try {
      const created = await uploadOk(t.app, token, { name: 'staged.txt', type: 'text/plain', content: paragraphs.join('\n\n') });
      // watch the staged rows appear (the pipeline yields between batches, so this poll gets turns)
      let maxSeen = 0;
      let watching = true;
      const watcher = (async () => {
        while (watching) {
          maxSeen = Math.max(maxSeen, (await chunkRows(t.database.db, created._id)).length);
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      const done = await waitForIngestion(t.app, token, created._id, 60_000);
      watching = false;
      await watcher;
      assert.ok(maxSeen > 0, 'the chunks were written ahead in staged batches');
      assert.equal(done.status, 'error');
      assert.equal(done.error_message, EMBEDDER_CHANGED_MESSAGE);
      assert.equal((await chunkRows(t.database.db, created._id)).length, 0);
    } finally {
      await t.database.db.execute(sql`update system_state set value = ${JSON.stringify({ id: probe.id, dimensions: 384, complete: true })}::jsonb where key = 'embedder'`);
    }
  });

  test("a large file's writes ahead of its activation give way to requests: while the app uses the database, one batch every 250 ms at most", async () => {
    const background = t.database.background!;
    // the app holds the database for the whole ingestion (an operation in flight until released)
    let endBusy!: () => void;
    const busy = background.activity.track(new Promise<void>((resolve) => (endBusy = resolve)));
    try {
      const paragraphs = Array.from({ length: 6000 }, (_, i) => `Entry ${i}: the tokay gecko ${i} climbs glass on its setae, ${i * 3} of them per toe.`);
      const created = await uploadOk(t.app, token, { name: 'gecko.txt', type: 'text/plain', content: paragraphs.join('\n\n') });
      // watched through the background handle, each change of the count with when it was seen
      const seen: Array<{ at: number; n: number }> = [];
      for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
        const [row] = await rowsOf<{ n: number; status: string }>(
          background.db,
          sql`select (select count(*)::int from chunks where upload_id = ${created._id}) as n, (select status from uploads where id = ${created._id}) as status`,
        );
        if (row!.n !== (seen.at(-1)?.n ?? 0)) seen.push({ at: performance.now(), n: row!.n });
        if (row!.status !== 'processing') break;
        await new Promise((r) => setTimeout(r, 10));
      }
      const done = await waitForIngestion(t.app, token, created._id, 60_000);
      assert.equal(done.status, 'active', done.error_message);
      // the writes ahead: every count but the last (the tail is written with the activation)
      const ahead = seen.slice(0, -1);
      assert.ok(ahead.length >= 4, `staged batches seen: ${JSON.stringify(seen.map((s) => s.n))}`);
      for (let i = 1; i < ahead.length; i++) {
        assert.ok(ahead[i]!.n - ahead[i - 1]!.n <= STAGED_BATCH_ROWS, `one batch of ${STAGED_BATCH_ROWS} at a time: ${JSON.stringify(seen.map((s) => s.n))}`);
        // each batch waited 250 ms for the busy app (polling every 10 ms sees it a little late or early)
        assert.ok(ahead[i]!.at - ahead[i - 1]!.at >= 150, `batches ${Math.round(ahead[i]!.at - ahead[i - 1]!.at)} ms apart`);
      }
    } finally {
      endBusy();
      await busy;
    }
  });

  test('a file deleted before its job runs is skipped: stays deleted, no chunks', async () => {
    // hold the queue: the probe fails, so the job is retried later while we delete the file
    probe.failures = 1;
    const created = await uploadOk(t.app, token, { name: 'gone.txt', type: 'text/plain', content: 'The dodo is extinct.' });
    await waitUntil('the first failed attempt', async () => (await jobOf(t.database.db, created._id))?.attempts === 1 && (await jobOf(t.database.db, created._id))?.status === 'pending');
    const del = await t.app.inject({ method: 'DELETE', url: `/api/user/files/${created._id}`, headers: bearer(token) });
    assert.equal(del.statusCode, 200);
    await waitUntil('the retry', async () => (await jobOf(t.database.db, created._id))?.status === 'done', 10_000);
    const after = await t.app.inject({ method: 'GET', url: `/api/user/files/${created._id}`, headers: bearer(token) });
    assert.equal(after.json().data.status, 'deleted');
    assert.equal((await chunkRows(t.database.db, created._id)).length, 0);
  });
});

describe('vault ingestion: retries with backoff, then a readable error', () => {
  let t: TestApp;
  let token: string;
  const clock = new ManualClock(new Date('2026-11-01T10:00:00Z'));
  const probe = new ProbeEmbedder();

  before(async () => {
    t = await startTestApp({ clock, build: { providers: { embedder: probe } } });
    const world = await makeWorld(t.database);
    token = (await login(t.app, world.userA1.email)).accessToken;
  });
  after(() => t.close());

  test('a transient embedder failure is retried after the backoff and the file becomes active', async () => {
    probe.failures = 1;
    const created = await uploadOk(t.app, token, { name: 'retry.txt', type: 'text/plain', content: 'Wombats produce cube-shaped droppings.' });
    await waitUntil('the failed first attempt', async () => (await jobOf(t.database.db, created._id))?.status === 'pending' && (await jobOf(t.database.db, created._id))?.attempts === 1);
    const waiting = (await t.app.inject({ method: 'GET', url: `/api/user/files/${created._id}`, headers: bearer(token) })).json().data;
    assert.equal(waiting.status, 'processing');
    assert.equal(waiting.stage, 'retrying');
    assert.match((await jobOf(t.database.db, created._id))!.last_error!, /provider down/);
    // not due yet: the clock has not moved, so the job waits
    await new Promise((r) => setTimeout(r, 600));
    assert.equal((await jobOf(t.database.db, created._id))!.attempts, 1);
    clock.advance(1500);
    const done = await waitForIngestion(t.app, token, created._id);
    assert.equal(done.status, 'active');
    assert.equal((await jobOf(t.database.db, created._id))!.status, 'done');
  });

  test('a permanent failure ends, after the last attempt, in error with a summary; the worker lives on', async () => {
    probe.failures = 1000;
    const created = await uploadOk(t.app, token, { name: 'fail.txt', type: 'text/plain', content: 'Sloths move slowly.' });
    for (const attempt of [1, 2]) {
      await waitUntil(`attempt ${attempt}`, async () => (await jobOf(t.database.db, created._id))?.attempts === attempt && (await jobOf(t.database.db, created._id))?.status === 'pending');
      clock.advance(10_000);
    }
    const done = await waitForIngestion(t.app, token, created._id);
    assert.equal(done.status, 'error');
    assert.equal(done.error_message, 'Embedding failed: provider down (test)');
    // the same worker still ingests the next file
    probe.failures = 0;
    const next = await uploadOk(t.app, token, { name: 'ok.txt', type: 'text/plain', content: 'Otters hold hands while sleeping.' });
    assert.equal((await waitForIngestion(t.app, token, next._id)).status, 'active');
  });
});

describe('vault ingestion: durable across restarts', () => {
  test('files uploaded while no worker runs (and a job of a dead worker) are ingested by the next app on the same database', async () => {
    const database = await openTestDatabase();
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-ingest-'));
    try {
      const first = await startTestApp({ database, dataDir, env: { INGEST_WORKERS: '0' } });
      const world = await makeWorld(database);
      let token = (await login(first.app, world.userA1.email)).accessToken;
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) {
        ids.push((await uploadOk(first.app, token, { name: `queued-${i}.txt`, type: 'text/plain', content: `Queued file ${i} about the kakapo parrot.` }))._id);
      }
      await new Promise((r) => setTimeout(r, 300));
      for (const id of ids) {
        const res = await first.app.inject({ method: 'GET', url: `/api/user/files/${id}`, headers: bearer(token) });
        assert.equal(res.json().data.status, 'processing');
        assert.equal(res.json().data.stage, 'queued');
      }
      const [pending] = await rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from jobs where status = 'pending'`);
      assert.equal(pending!.n, 4);
      // one job was claimed by a process on another host that died 10 minutes ago (its lease is over)
      await database.db.execute(
        sql`update jobs set status = 'running', attempts = 1, locked_by = 'elsewhere/4242/dead/1', locked_at = now() - interval '10 minutes' where payload->>'uploadId' = ${ids[0]!}`,
      );
      await first.close();

      const second = await startTestApp({ database, dataDir, env: { INGEST_WORKERS: '2' } });
      token = (await login(second.app, world.userA1.email)).accessToken;
      for (const id of ids) {
        const done = await waitForIngestion(second.app, token, id);
        assert.equal(done.status, 'active', done.error_message);
        assert.ok(done.chunkCount > 0);
      }
      assert.deepEqual(await jobOf(database.db, ids[0]!), { status: 'done', attempts: 2, last_error: 'worker lost (elsewhere/4242/dead/1)' });
      await second.close();
    } finally {
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('a job whose process died while running it counts that attempt: at the last one the upload ends in error, its staged chunks removed', async () => {
    // Issue 7 row 1: a file that killed the process was retried after every restart. Each claim counts
    // an attempt in the jobs row before any work starts, so the count survives the process; the sweep of
    // the next process sees the owner dead and, at INGEST_MAX_ATTEMPTS, fails the job instead of retrying.
    const database = await openTestDatabase();
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-ingest-'));
    try {
      const first = await startTestApp({ database, dataDir, env: { INGEST_WORKERS: '0' } });
      const world = await makeWorld(database);
      let token = (await login(first.app, world.userA1.email)).accessToken;
      const poison = (await uploadOk(first.app, token, { name: 'poison.txt', type: 'text/plain', content: 'Pretend this file kills the server.' }))._id;
      const survivor = (await uploadOk(first.app, token, { name: 'survivor.txt', type: 'text/plain', content: 'This one was running once when the server died.' }))._id;
      // a process of this host (a pid that has exited) claimed both; it had staged a chunk of the poison file
      const { hostname } = await import('node:os');
      const { spawnSync } = await import('node:child_process');
      const deadPid = spawnSync(process.execPath, ['-e', '0']).pid!;
      const owner = `${hostname()}/${deadPid}/deadbeef/1`;
      await database.db.execute(sql`update jobs set status = 'running', attempts = ${INGEST_MAX_ATTEMPTS}, locked_by = ${owner}, locked_at = now() where payload->>'uploadId' = ${poison}`);
      await database.db.execute(sql`update jobs set status = 'running', attempts = 1, locked_by = ${owner}, locked_at = now() where payload->>'uploadId' = ${survivor}`);
      await database.db.execute(
        sql`insert into chunks (id, upload_id, chunk_index, text, tokens, created_at, updated_at) values (${newId()}, ${poison}, 0, 'staged', 1, now(), now())`,
      );
      await first.close();

      const second = await startTestApp({ database, dataDir, env: { INGEST_WORKERS: '1' } });
      token = (await login(second.app, world.userA1.email)).accessToken;
      const failed = await waitForIngestion(second.app, token, poison);
      assert.equal(failed.status, 'error');
      assert.equal(failed.error_message, `The server stopped while ingesting this file, ${INGEST_MAX_ATTEMPTS} times; it is not retried again and was not indexed`);
      assert.equal((await jobOf(database.db, poison))!.status, 'failed');
      assert.deepEqual(await chunkRows(database.db, poison), []);
      // one death is not the file's fault: the other job is retried and succeeds
      const ok = await waitForIngestion(second.app, token, survivor);
      assert.equal(ok.status, 'active', ok.error_message);
      assert.deepEqual(await jobOf(database.db, survivor), { status: 'done', attempts: 2, last_error: `worker lost (${owner})` });
      await second.close();
    } finally {
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('closing the app mid-queue waits for the running job and leaves none running; the next app finishes the rest', async () => {
    const database = await openTestDatabase();
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-ingest-'));
    try {
      const first = await startTestApp({ database, dataDir, env: { INGEST_WORKERS: '1' } });
      const world = await makeWorld(database);
      let token = (await login(first.app, world.userA1.email)).accessToken;
      const body = Array.from({ length: 300 }, (_, i) => `Sentence ${i} about the shoebill stork standing still.`).join('\n\n');
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push((await uploadOk(first.app, token, { name: `mid-${i}.txt`, type: 'text/plain', content: body }))._id);
      await first.close();
      const states = await rowsOf<{ status: string; n: number }>(database.db, sql`select status, count(*)::int as n from jobs group by status`);
      assert.ok(states.every((s) => s.status === 'pending' || s.status === 'done'), JSON.stringify(states));
      const uploads = await rowsOf<{ status: string; stage: string }>(database.db, sql`select status, stage from uploads`);
      assert.ok(uploads.every((u) => u.status === 'active' || (u.status === 'processing' && u.stage === 'queued')), JSON.stringify(uploads));

      const second = await startTestApp({ database, dataDir, env: { INGEST_WORKERS: '1' } });
      token = (await login(second.app, world.userA1.email)).accessToken;
      for (const id of ids) assert.equal((await waitForIngestion(second.app, token, id)).status, 'active');
      await second.close();
    } finally {
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('vault ingestion: embedder changes never mix vectors', () => {
  test('a different embedder is refused until reembed, which resizes the column and re-embeds every chunk', async () => {
    const database = await openTestDatabase();
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-ingest-'));
    try {
      // a data directory made by the local embedder's first version, then the upgrade to version 2 (and 64 dimensions)
      const first = await startTestApp({ database, dataDir, env: { EMBEDDINGS_LOCAL_VERSION: '1' } });
      const world = await makeWorld(database);
      let token = (await login(first.app, world.userA1.email)).accessToken;
      const old = await uploadOk(first.app, token, { name: 'old.txt', type: 'text/plain', content: 'Narwhal tusks are teeth.\n\nThey can grow three metres long.' });
      assert.equal((await waitForIngestion(first.app, token, old._id)).status, 'active');
      const [state] = await rowsOf<{ value: { id: string; dimensions: number } }>(database.db, sql`select value from system_state where key = 'embedder'`);
      assert.equal(state!.value.id, 'local:hashed-ngrams-v1:384');
      await first.close();

      const second = await startTestApp({ database, dataDir, env: { EMBEDDINGS_DIMENSIONS: '64' } });
      token = (await login(second.app, world.userA1.email)).accessToken;
      const refused = await uploadOk(second.app, token, { name: 'new.txt', type: 'text/plain', content: 'Puffins mate for life.' });
      const result = await waitForIngestion(second.app, token, refused._id);
      assert.equal(result.status, 'error');
      assert.equal(result.error_message, EMBEDDER_CHANGED_MESSAGE);
      const [before] = await rowsOf<{ dims: number }>(database.db, sql`select vector_dims(embedding) as dims from (select embedding from chunk_vectors union all select embedding from chunk_vectors_staged) x limit 1`);
      assert.equal(before!.dims, 384);

      const outcome = await reembedAll(second.app.ctx);
      assert.equal(outcome.resized, true);
      assert.equal(outcome.dimensions, 64);
      assert.ok(outcome.chunks > 0);
      const dims = await rowsOf<{ dims: number | null }>(database.db, sql`select vector_dims(coalesce(v.embedding, s.embedding)) as dims from chunks c left join chunk_vectors v on v.chunk_id = c.id left join chunk_vectors_staged s on s.chunk_id = c.id`);
      assert.ok(dims.length > 0 && dims.every((d) => d.dims === 64));
      const [index] = await rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from pg_indexes where indexname = 'chunk_vectors_hnsw'`);
      assert.equal(index!.n, 1);
      const [after] = await rowsOf<{ value: { id: string; dimensions: number; complete: boolean } }>(database.db, sql`select value from system_state where key = 'embedder'`);
      assert.deepEqual(after!.value, { id: 'local:hashed-ngrams-v2:64', dimensions: 64, complete: true });
      const [model] = await rowsOf<{ embedding_model: string }>(database.db, sql`select embedding_model from uploads where id = ${old._id}`);
      assert.equal(model!.embedding_model, 'local:hashed-ngrams-v2:64');

      const accepted = await uploadOk(second.app, token, { name: 'again.txt', type: 'text/plain', content: 'Puffins mate for life.' });
      assert.equal((await waitForIngestion(second.app, token, accepted._id)).status, 'active');
      await second.close();
    } finally {
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('vault ingestion: the embedder check at boot', () => {
  test('with no chunk the configured embedder is adopted once, under the lock: a concurrent check finds it done; with chunks nothing is resized', async () => {
    const database = await openTestDatabase();
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-embedder-'));
    try {
      const config = testConfig(dataDir);
      const node = (dimensions: number, version: 1 | 2 = 2) => ({ db: database.db, config, providers: { embedder: new LocalEmbedder(dimensions, version) }, log: silentLog });
      assert.equal(await embeddingColumnDimensions(database.db), 384);
      // two nodes booting together with a 64-dimension embedder: one resizes, the other decides again under the lock
      const [a, b] = await Promise.all([checkEmbedder(node(64)), checkEmbedder(node(64))]);
      assert.deepEqual([a.status, b.status].sort(), ['ok', 'recorded']);
      assert.equal(await embeddingColumnDimensions(database.db), 64);
      assert.deepEqual(await readEmbedderState(database.db), { id: 'local:hashed-ngrams-v2:64', dimensions: 64, complete: true });
      const [index] = await rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from pg_indexes where indexname = 'chunk_vectors_hnsw'`);
      assert.equal(index!.n, 1);
      // still no chunk: another model is adopted (here the local embedder's first version, as a data directory made before version 2)
      assert.equal((await checkEmbedder(node(384, 1))).status, 'adopted');
      assert.equal(await embeddingColumnDimensions(database.db), 384);
      assert.equal((await checkEmbedder(node(384, 1))).status, 'ok');

      // with a chunk stored, a different embedder is refused and the column left alone
      const world = await makeWorld(database);
      const uploadId = newId();
      await database.db.execute(
        sql`insert into uploads (id, originalname, filesize, mimetype, scope, owner_user_id, account_id, status, storage_key, sha256)
            values (${uploadId}, 'a.txt', 1, 'text/plain', 'personal', ${world.userA1.id}, ${world.accountA.id}, 'active', ${`test/${uploadId}`}, ${'0'.repeat(64)})`,
      );
      const [vector] = await new LocalEmbedder(384, 1).embed(['kept']);
      const chunkId = newId();
      await database.db.execute(sql`insert into chunks (id, upload_id, chunk_index, text, tokens) values (${chunkId}, ${uploadId}, 0, 'kept', 1)`);
      await database.db.execute(sql`insert into chunk_vectors (chunk_id, upload_id, embedding) values (${chunkId}, ${uploadId}, ${`[${vector!.join(',')}]`}::vector)`);
      const refused = await checkEmbedder(node(64));
      assert.equal(refused.status, 'mismatch');
      assert.equal(await embeddingColumnDimensions(database.db), 384);
      assert.equal((await readEmbedderState(database.db))?.id, 'local:hashed-ngrams-v1:384');
      // the default (version 2) over version 1's vectors: refused, and the message names both ways out
      const upgraded = await checkEmbedder(node(384));
      assert.equal(upgraded.status, 'mismatch');
      assert.match('message' in upgraded ? upgraded.message : '', /made by local:hashed-ngrams-v1:384 .*configured embedder is local:hashed-ngrams-v2:384 .*npm run cli -- reembed.*EMBEDDINGS_LOCAL_VERSION=1/);
      assert.doesNotMatch('message' in refused ? refused.message : '', /EMBEDDINGS_LOCAL_VERSION/);
      assert.equal((await checkEmbedder(node(384, 1))).status, 'ok');
    } finally {
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('job queue', () => {
  let database: Awaited<ReturnType<typeof openTestDatabase>>;
  before(async () => {
    database = await openTestDatabase();
  });
  after(() => database.close());

  test('several workers on one queue run each job exactly once', async () => {
    const seen: string[] = [];
    const handler = async (payload: Record<string, unknown>) => {
      seen.push(String(payload.n));
      await new Promise((r) => setTimeout(r, 2));
    };
    const workers = [1, 2, 3].map(() => new Worker({ db: database.db, queue: 'test.once', handler, log: silentLog, pollIntervalMs: 20 }));
    for (let i = 0; i < 30; i++) await enqueue(database.db, 'test.once', { n: i });
    workers.forEach((w) => w.start());
    await waitUntil('all jobs', async () => seen.length >= 30);
    await Promise.all(workers.map((w) => w.stop()));
    assert.equal(seen.length, 30);
    assert.equal(new Set(seen).size, 30);
    const [left] = await rowsOf<{ n: number }>(database.db, sql`select count(*)::int as n from jobs where queue = 'test.once' and status <> 'done'`);
    assert.equal(left!.n, 0);
  });

  test('a lease that expires is taken back; a dead local process is detected at once; exhausted jobs fail and are reported', async () => {
    const clock = new ManualClock(new Date('2026-11-01T10:00:00Z'));
    const given: Job[] = [];
    const worker = new Worker({ db: database.db, queue: 'test.lease', handler: async () => undefined, log: silentLog, clock, leaseMs: 60_000, onGiveUp: async (job) => void given.push(job) });
    const now = clock.now();
    await enqueue(database.db, 'test.lease', { k: 'stale' }, { runAt: now });
    await enqueue(database.db, 'test.lease', { k: 'dead-pid' }, { runAt: now });
    await enqueue(database.db, 'test.lease', { k: 'exhausted' }, { runAt: now, maxAttempts: 1 });
    const set = async (k: string, lockedBy: string, lockedAt: Date, attempts: number) =>
      database.db.execute(
        sql`update jobs set status = 'running', locked_by = ${lockedBy}, locked_at = ${lockedAt.toISOString()}, attempts = ${attempts} where queue = 'test.lease' and payload->>'k' = ${k}`,
      );
    const { hostname } = await import('node:os');
    await set('stale', 'otherhost/1/aa/1', new Date(now.getTime() - 30_000), 1);
    await set('dead-pid', `${hostname()}/2147483000/bb/1`, now, 1); // no such process on this host
    await set('exhausted', 'otherhost/1/aa/1', new Date(now.getTime() - 120_000), 1);
    const status = async (k: string) =>
      (await rowsOf<{ status: string }>(database.db, sql`select status from jobs where queue = 'test.lease' and payload->>'k' = ${k}`))[0]!.status;

    assert.equal(await worker.sweep(), 2);
    assert.equal(await status('dead-pid'), 'pending');
    assert.equal(await status('exhausted'), 'failed');
    assert.equal(await status('stale'), 'running'); // lease (60 s) not over yet
    assert.deepEqual(
      given.map((j) => j.payload.k),
      ['exhausted'],
    );
    clock.advance(31_000);
    assert.equal(await worker.sweep(), 1);
    assert.equal(await status('stale'), 'pending');
  });

  test('an idle worker polls less and less often, up to idlePollMaxMs, and still takes the jobs enqueued meanwhile', async () => {
    const ran: number[] = [];
    const worker = new Worker({ db: database.db, queue: 'test.idle', handler: async (payload) => void ran.push(Number(payload.n)), log: silentLog, pollIntervalMs: 20, idlePollMaxMs: 160 });
    let polls = 0;
    const claim = worker.claim.bind(worker);
    worker.claim = async () => {
      polls++;
      return claim();
    };
    worker.start();
    try {
      await new Promise((r) => setTimeout(r, 1000));
      // every 20 ms without the backoff: ~50 polls in a second (fewer on a busy machine, never more);
      // with it 20, 40, 80, 160, 160, ... ms: 9 or fewer
      assert.ok(polls >= 2 && polls <= 12, `${polls} polls in a second`);
      // backed off, it still takes the work it is woken for
      await enqueue(database.db, 'test.idle', { n: 1 });
      await waitUntil('the job ran', async () => ran.length === 1);
      assert.deepEqual(ran, [1]);
    } finally {
      await worker.stop();
    }
  });

  /** Runs a worker on `queue` (two attempts, no backoff) until the job fails for good; its row and what onGiveUp got. */
  async function runUntilGivenUp(db: Db, queue: string, handler: () => Promise<void>) {
    const given: string[] = [];
    const worker = new Worker({ db, queue, log: silentLog, pollIntervalMs: 10, backoffMs: () => 0, handler, onGiveUp: async (_job, error) => void given.push(error) });
    await enqueue(database.db, queue, { k: 1 }, { maxAttempts: 2 });
    worker.start();
    try {
      await waitUntil('the job to fail for good', async () => given.length === 1, 10_000);
    } finally {
      await worker.stop();
    }
    const [row] = await rowsOf<{ status: string; attempts: number; last_error: string }>(database.db, sql`select status, attempts, last_error from jobs where queue = ${queue}`);
    return { row, given };
  }

  test('an error message with NUL and control characters is recorded without them; the job is retried, then fails, never left running', async () => {
    const { row, given } = await runUntilGivenUp(database.db, 'test.nul', async () => {
      throw new Error(`bad\u0000byte\u0007 here\tand\nthere ${'x'.repeat(5000)}`);
    });
    assert.deepEqual(row && { status: row.status, attempts: row.attempts }, { status: 'failed', attempts: 2 }, JSON.stringify(row));
    assert.equal(row!.last_error.startsWith('badbyte here\tand\nthere xxx'), true, `last_error keeps tab and newline, drops NUL and BEL: ${JSON.stringify(row!.last_error.slice(0, 40))}`);
    assert.equal(row!.last_error.length, 1000, `last_error is capped at 1,000 characters, got ${row!.last_error.length}`);
    assert.equal(given[0]!.startsWith('badbyte here'), true, `onGiveUp gets the cleaned message: ${JSON.stringify(given[0]!.slice(0, 20))}`);
  });

  test('when the database refuses the write that ends a run, a generic message is written instead: the job never stays running', async () => {
    // the database refuses any statement carrying the marker (as it refuses what storableText cannot know of)
    const marker = 'refused-by-the-database';
    const refusing = new Proxy(database.db, {
      get(target, prop, receiver) {
        if (prop !== 'execute') return Reflect.get(target, prop, receiver) as unknown;
        return async (query: Parameters<Db['execute']>[0]) => {
          const { params } = (target as unknown as { dialect: { sqlToQuery(q: unknown): { params: unknown[] } } }).dialect.sqlToQuery(query);
          if (params.some((p) => typeof p === 'string' && p.includes(marker))) throw new Error('the database refused the value (test)');
          return target.execute(query);
        };
      },
    });
    const { row, given } = await runUntilGivenUp(refusing, 'test.refused', async () => {
      throw new Error(`failed: ${marker}`);
    });
    assert.deepEqual(row, { status: 'failed', attempts: 2, last_error: "the job's error could not be recorded (fail)" }, JSON.stringify(row));
    assert.equal(given[0], `failed: ${marker}`, 'onGiveUp still gets the real reason');
  });

  test('stop() lets the running job finish; a job still running after the grace period is released without using an attempt', async () => {
    let finished = 0;
    const slow = new Worker({
      db: database.db,
      queue: 'test.stop',
      log: silentLog,
      pollIntervalMs: 10,
      stopGraceMs: 50,
      handler: async (payload, { signal }) => {
        if (payload.kind === 'quick') {
          await new Promise((r) => setTimeout(r, 100));
          finished++;
          return;
        }
        await new Promise<void>((resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error)));
      },
    });
    await enqueue(database.db, 'test.stop', { kind: 'endless' });
    slow.start();
    await waitUntil('the job to start', async () => slow.busy);
    await slow.stop();
    const [row] = await rowsOf<{ status: string; attempts: number; locked_by: string | null }>(database.db, sql`select status, attempts, locked_by from jobs where queue = 'test.stop'`);
    assert.deepEqual(row, { status: 'pending', attempts: 0, locked_by: null });
    assert.equal(finished, 0);
  });
});
