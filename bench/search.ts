/**
 * Content-search latency at 10k and 100k chunks in scope, by the index and by exact scan, in one run.
 *
 *   npx tsx bench/search.ts [totalChunks=100000] [queries=40] [collectionDir=/work/shared/datasets/cranfield]
 *
 * Builds an on-disk PGlite with `totalChunks` chunks in 100 personal files of one user (texts: the
 * collection's abstracts, each with a generated sentence so that no two chunks are equal; vectors from
 * the local embedder; BM25 statistics and knowledge graph written by the search module's own writers),
 * then builds the HNSW index in bulk (timed) and measures, for the collection's queries:
 *   - POST /api/user/files/search-content over HTTP (the real app on 127.0.0.1, the requests sent one at a
 *     time from a client process: bench/http-client.ts): p50/p95 with the
 *     10k scope (selectedUploadIds = 10 files) and the 100k scope (all files), over the third and fourth
 *     passes of the queries: the first reads the scope's indexes into memory (its first request is printed),
 *     the second lets the garbage of that one-time read be collected, so that the two timed passes (twice
 *     the queries: 80 requests with the default 40) measure the steady state;
 *   - the dense side alone by the HNSW index and by exact scan, same scopes: p50/p95 and the ratio;
 *   - HNSW maintenance: per-row cost of inserting 500 more chunks into the indexed table, against the
 *     per-row cost of the bulk build.
 * The server holds the lexical and graph indexes of the scope in memory, bounded by SEARCH_INDEX_CACHE_MB
 * (1024 here unless set: 2.7 KB a chunk of these texts in files of 1,000 chunks, 4.3 KB in files of 120, so
 * 100k chunks fill the default 256).
 *
 * The server runs its database in a worker thread as `npm start` does, and with its node flags (the script runs itself
 * again under them: bench/support.ts, SERVER_NODE_FLAGS); PGLITE_WORKER=false runs the database in process.
 * BENCH_SEARCH_DIR=<dir> keeps the data directory there instead of a temporary one; a later run with the
 * same directory and the same totalChunks skips the seeding, the HNSW build and the insert measurement, and
 * times the dense side and the route again (for before/after runs of two commits on one dataset).
 * EMBEDDINGS_LOCAL_VERSION (1 or 2, default 2) is the local embedder's version for seeding and queries: a kept
 * dataset seeded before version 2 existed needs 1, or its queries are embedded by another model than its chunks.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { hashPassword } from '../src/modules/identity/passwords.js';
import { writeIndexedChunks } from '../src/modules/search/indexing.js';
import { createEmbeddingIndex, denseSearch, drainStagedVectors, dropEmbeddingIndex, refreshUploadIndex } from '../src/modules/search/search.repository.js';
import { packVector } from '../src/modules/search/vectors.js';
import { insertUpload } from '../src/modules/vault/uploads.repository.js';
import { insertAccount, insertUser } from '../src/modules/tenancy/tenancy.repository.js';
import { LocalEmbedder } from '../src/providers/embeddings/index.js';
import type { LocalEmbedderVersion } from '../src/providers/embeddings/local.js';
import { newId } from '../src/shared/ids.js';
import { loadCollection } from '../scripts/eval-search.js';
import { underServerFlags } from './support.js';

// the app runs in this process: with the node flags `npm start` gives the server
underServerFlags();

const total = Number(process.argv[2] ?? 100_000);
const nQueries = Number(process.argv[3] ?? 40);
const collectionDir = process.argv[4] ?? '/work/shared/datasets/cranfield';
const FILES = 100;
/** The local embedder's version, for seeding and queries alike: a dataset kept from before version 2 needs EMBEDDINGS_LOCAL_VERSION=1 (the server's variable). */
const localVersion = Number(process.env.EMBEDDINGS_LOCAL_VERSION ?? 2) as LocalEmbedderVersion;
const perFile = Math.ceil(total / FILES);

function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} ms, p95 ${pct(xs, 95).toFixed(1)} ms`;

/**
 * The requests are sent from a process of their own (bench/http-client.ts), as the suite's load generators are, so that
 * the client's work does not run on the server's thread (until 2026-11-28 this script sent them with fetch from its own
 * thread, and its figures until then include the client's work: bench/RESULTS.md, twenty-fifth pass).
 */
interface Sent {
  ms: number[];
  status: number[];
  tookMs: Array<number | null>;
}

function sendFromClientProcess(job: { url: string; headers: Record<string, string>; bodies: string[] }): Promise<Sent> {
  const client = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./http-client.ts', import.meta.url))], { stdio: ['pipe', 'pipe', 'inherit'] });
  const parts: Buffer[] = [];
  client.stdout.on('data', (b: Buffer) => parts.push(b));
  client.stdin.end(JSON.stringify(job));
  return new Promise((resolve, reject) => {
    client.on('error', reject);
    client.on('exit', (code) => (code === 0 ? resolve(JSON.parse(Buffer.concat(parts).toString('utf8')) as Sent) : reject(new Error(`bench/http-client.ts exited with ${code}`))));
  });
}

const col = loadCollection(collectionDir);
const words = col.docs.flatMap((d) => d.text.toLowerCase().match(/[a-z]+/g) ?? []);
const keepDir = process.env.BENCH_SEARCH_DIR;
const dir = keepDir ?? mkdtempSync(join(tmpdir(), 'bench-search-'));
if (keepDir) mkdirSync(keepDir, { recursive: true });
const seededFile = join(dir, 'seeded.json');
const seeded = existsSync(seededFile) ? (JSON.parse(readFileSync(seededFile, 'utf8')) as { total: number; userId: string; uploadIds: string[] }) : undefined;
if (seeded && seeded.total !== total) throw new Error(`${dir} holds ${seeded.total} chunks, not ${total}`);
const database = await openDatabase({ pgliteDataDir: join(dir, 'pgdata') });
/** The server's own database for the route's timing: the engine in a worker thread, as `npm start` runs it (PGLITE_WORKER=false: in process). */
const routeWorker = process.env.PGLITE_WORKER !== 'false';
/** The connection open now (the seeding one, then the server's), closed at the end. */
let open: Awaited<ReturnType<typeof openDatabase>> | undefined = database;
try {
  await database.migrate();
  const db = database.db;
  const { userId, uploadIds, written } = seeded ? { ...seeded, written: seeded.total } : await seed();
  if (keepDir && !seeded) writeFileSync(seededFile, JSON.stringify({ total, userId, uploadIds }));
  await timeRoute(db, userId, uploadIds, written);
} finally {
  await open?.close();
  if (!keepDir) rmSync(dir, { recursive: true, force: true });
}

async function seed() {
  const db = database.db;
  const account = await insertAccount(db, { id: newId(), name: 'Bench' });
  const password = 'bench-password-1';
  // a superadmin: the route's single-method switch (`method`) times each side alone in the same run
  const user = await insertUser(db, { id: newId(), accountId: account.id, email: 'bench@example.com', passwordHash: await hashPassword(password), role: 'superadmin' });
  const embedder = new LocalEmbedder(384, localVersion);
  const r = rng(7);
  const now = new Date();
  const uploadIds: string[] = [];
  await db.transaction((tx) => dropEmbeddingIndex(tx));
  let t0 = performance.now();
  let written = 0;
  for (let f = 0; f < FILES; f++) {
    const id = newId();
    uploadIds.push(id);
    await insertUpload(db, { id, originalname: `file-${f}.txt`, filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: user.id, accountId: account.id, status: 'processing', storageKey: id, sha256: id });
    for (let i = 0; i < perFile; i += 500) {
      const texts = Array.from({ length: Math.min(500, perFile - i) }, () => {
        const doc = col.docs[Math.floor(r() * col.docs.length)]!.text;
        const extra = Array.from({ length: 12 }, () => words[Math.floor(r() * words.length)]).join(' ');
        return `${doc} ${extra}.`;
      });
      const vectors = await embedder.embed(texts);
      await writeIndexedChunks(
        db,
        id,
        texts.map((text, j) => ({ id: newId(), index: i + j, text, heading: null, tokens: Math.round(text.length / 5), embedding: packVector(vectors[j]!, 384) })),
        now,
      );
      written += texts.length;
    }
    await refreshUploadIndex(db, id);
    await db.execute(sql`update uploads set status = 'active', chunk_count = ${perFile} where id = ${id}`);
    if (f % 10 === 9) console.log(`  ${written} chunks written (${(written / ((performance.now() - t0) / 1000)).toFixed(0)} chunks/s without the HNSW index)`);
  }
  const writeMs = performance.now() - t0;
  t0 = performance.now();
  // the staged vectors under the index in one bulk build (the server's drain would take them 8 at a time)
  await db.execute(sql`insert into chunk_vectors (chunk_id, upload_id, embedding) select chunk_id, upload_id, embedding from chunk_vectors_staged`);
  await db.execute(sql`delete from chunk_vectors_staged`);
  // as the server's drain does once it has emptied the staging table (PGlite has no autovacuum): without it the
  // table keeps 100k dead rows (~200 MB) and its index their entries, which searches' joins to it walk through
  // (reading a page of result rows took 5.0 ms instead of 2.9 on the 100k dataset)
  await db.execute(sql`vacuum chunk_vectors_staged`);
  await createEmbeddingIndex(db);
  const buildMs = performance.now() - t0;
  await db.execute(sql`analyze`);
  console.log(`${written} chunks written in ${(writeMs / 1000).toFixed(1)} s (${(written / (writeMs / 1000)).toFixed(0)} chunks/s: chunk rows, tsvector, BM25 lengths, graph mentions and edges; no HNSW)`);
  console.log(`HNSW bulk build over ${written} vectors: ${(buildMs / 1000).toFixed(1)} s = ${(buildMs / written).toFixed(2)} ms per row`);

  // HNSW maintenance cost per row once the index exists
  {
    const extra = newId();
    await insertUpload(db, { id: extra, originalname: 'extra.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: user.id, accountId: account.id, status: 'processing', storageKey: extra, sha256: extra });
    const texts = Array.from({ length: 500 }, (_, i) => `extra chunk ${i} ${words.slice(i * 7, i * 7 + 40).join(' ')}`);
    const vectors = await embedder.embed(texts);
    const rows = texts.map((text, j) => ({ id: newId(), index: j, text, heading: null, tokens: 40, embedding: packVector(vectors[j]!, 384) }));
    for (let i = 0; i < rows.length; i += 100) await writeIndexedChunks(db, extra, rows.slice(i, i + 100), now);
    const s = performance.now();
    while ((await drainStagedVectors(db, 8)) > 0);
    const ms = performance.now() - s;
    console.log(`incremental HNSW insert (the drain, 8 a statement): ${(ms / rows.length).toFixed(2)} ms per row (${(rows.length / (ms / 1000)).toFixed(0)} vectors/s)`);
    await db.execute(sql`delete from uploads where id = ${extra}`);
  }
  return { userId: user.id, uploadIds, written };
}

async function timeRoute(db: typeof database.db, userId: string, uploadIds: string[], written: number) {
  const embedder = new LocalEmbedder(384, localVersion);
  const queries = col.queries.slice(0, nQueries).map((q) => q.text);
  const scopes: Array<{ name: string; ids?: string[] }> = [
    { name: `${(perFile * 10) / 1000}k`, ids: uploadIds.slice(0, 10) },
    { name: `${(perFile * FILES) / 1000}k`, ids: undefined },
  ];
  // dense side alone: index vs exact scan
  for (const scope of scopes) {
    const cond = scope.ids ? sql`u.status = 'active' and u.id in (${sql.join(scope.ids.map((i) => sql`${i}`), sql`, `)})` : sql`u.status = 'active' and u.owner_user_id = ${userId}`;
    const vecs = (await embedder.embed(queries)).map((v) => packVector(v, 384));
    const run = async (exact: boolean) => {
      const ms: number[] = [];
      for (const v of vecs) {
        const s = performance.now();
        await denseSearch(db, cond, v, 20, exact);
        ms.push(performance.now() - s);
      }
      return ms;
    };
    await run(false); // warm
    const index = await run(false);
    const exact = await run(true);
    console.log(`dense top-20, ${scope.name} chunks in scope: HNSW ${fmt(index)}; exact scan ${fmt(exact)}; exact/index at p95 = ${(pct(exact, 95) / pct(index, 95)).toFixed(1)}×`);
  }

  // the route, over HTTP
  const config = loadConfig({ NODE_ENV: 'production', DATA_DIR: dir, JWT_SECRET: 'bench-secret-bench-secret-bench-secret-0123', ENCRYPTION_KEY: 'bench-encryption-key-bench-encryption-0123', LOG_LEVEL: 'warn', INGEST_WORKERS: '0', SEARCH_RATE_LIMIT_PER_MINUTE: '100000', SEARCH_INDEX_CACHE_MB: process.env.SEARCH_INDEX_CACHE_MB ?? '1024', EMBEDDINGS_LOCAL_VERSION: String(localVersion) });
  if (routeWorker) {
    await database.close();
    open = undefined;
    open = await openDatabase({ pgliteDataDir: join(dir, 'pgdata'), pgliteWorker: true });
  }
  const app = await buildApp({ config, database: open ?? database, skipMigrations: true });
  console.log(`the server's database: PGlite ${routeWorker ? 'in a worker thread' : 'in process (PGLITE_WORKER=false)'}`);
  await app.listen({ port: 0, host: '127.0.0.1' });
  console.log(`in-memory copies of the indexes bounded by SEARCH_INDEX_CACHE_MB = ${config.searchIndexCacheMb}`);
  const address = app.server.address();
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const login = (await (await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'bench@example.com', password: 'bench-password-1' }) })).json()) as { accessToken: string };
  for (const scope of scopes) for (const method of [undefined, 'dense', 'lexical', 'kag'] as const) {
    const bodies = [...queries, ...queries, ...queries, ...queries].map((query) => JSON.stringify({ query, selectedUploadIds: scope.ids, ...(method ? { method } : {}) }));
    const url = `${base}/api/user/files/search-content`;
    const headers = { authorization: `Bearer ${login.accessToken}` };
    const sent = await sendFromClientProcess({ url, headers, bodies });
    const bad = sent.status.findIndex((s) => s !== 200);
    if (bad >= 0) throw new Error(`search-content answered ${sent.status[bad]} to ${bodies[bad]}`);
    const first = sent.ms[0]!;
    const ms = sent.ms.slice(2 * queries.length);
    const server = sent.tookMs.slice(2 * queries.length).map(Number);
    // the first request of a scope reads its uploads' indexes into memory (search/segments.ts); the timed passes are the third and fourth
    console.log(`search-content${method ? ` (${method} only)` : ''}, ${scope.name} chunks in scope: ${fmt(ms)} (server-side tookMs ${fmt(server)}); first request ${first.toFixed(1)} ms`);
  }
  const held = app.ctx.searchIndex.size;
  console.log(`in-memory copies held at the end: ${held.segments} files, about ${(held.bytes / 1024 / 1024).toFixed(0)} MB (${(held.bytes / written).toFixed(0)} bytes per chunk)`);
  await app.close();
}
