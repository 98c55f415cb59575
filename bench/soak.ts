/**
 * Soak (`npm run soak`): a mixed workload at half the measured capacity for a configurable time,
 * reporting errors (must be 0), latency percentiles per interval and the server's memory.
 *
 *   npm run soak -- [--minutes 10] [--warmup-minutes 1] [--interval-seconds 30] [--rate <req/s>]
 *
 * The server runs in its own process on a fresh data directory (or DATABASE_URL); load comes from
 * this process. The workload, cycled by every connection: GET /api/user/me, the vault listings
 * (files, collections), the user's institutions, the admin listings (users, institutions,
 * accounts), a login every 20 requests (argon2: the costliest request), and every route of the
 * search and Q&A modules that exists on this build (probed in /openapi.json). Beside it, a vault
 * writer uploads a small file every 10 s, waits for it to be indexed and deletes it.
 *
 * Capacity is measured first (10 connections, 10 s, same mix); the soak then runs at half of it
 * (--rate overrides). The process exits 1 if any request failed or answered ≥ 400, or if RSS grew
 * more than 10% between the end of the warm-up and the end.
 */
import autocannon from 'autocannon';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startOpenAiStub } from '../test/support/openai-stub.js';
import { api, freePort, operations, percentile, rssOf, runProcess, seedWorld, startServer, stopProcess, uploadThroughApi, waitUntilIngested } from './support.js';

const { values: opts } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    'warmup-minutes': { type: 'string', default: '1' },
    'interval-seconds': { type: 'string', default: '30' },
    rate: { type: 'string' },
  },
});
const minutes = Number(opts.minutes);
const warmupMs = Number(opts['warmup-minutes']) * 60_000;
const intervalMs = Number(opts['interval-seconds']) * 1000;

const dataDir = mkdtempSync(join(tmpdir(), 'twin-soak-'));
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const admin = { email: `soak-admin-${Date.now()}@example.com`, password: 'soak-admin-password' };
const stub = await startOpenAiStub();
const env: Record<string, string> = {
  DATA_DIR: dataDir,
  PORT: String(port),
  HOST: '127.0.0.1',
  NODE_ENV: 'production',
  JWT_SECRET: 'soak-jwt-secret-soak-jwt-secret-0123456789ab',
  ENCRYPTION_KEY: 'soak-encryption-key-soak-encryption-key-012',
  LOG_LEVEL: 'warn',
  LOGIN_RATE_LIMIT_PER_IP: '100000',
  LOGIN_RATE_LIMIT_PER_EMAIL: '100000',
  LOGIN_RATE_LIMIT_WINDOW_SECONDS: '60',
  SEARCH_RATE_LIMIT_PER_MINUTE: '100000',
  UPLOAD_RATE_LIMIT_PER_MINUTE: '100000',
  QANDA_RATE_LIMIT_PER_MINUTE: '1000000',
  // access tokens must outlive the soak: the load generator cannot refresh them mid-run
  ACCESS_TOKEN_TTL_SECONDS: String(Math.min(86_400, Math.ceil(minutes * 60 + 3600))),
  LLM_PROVIDER: 'openai-compatible',
  LLM_BASE_URL: stub.baseUrl,
  LLM_MODEL: 'soak-model',
  ...(process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {}),
};

console.log(`soak: ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}, ${minutes} min, ${new Date().toISOString()}`);
await runProcess(['src/cli.ts', 'create-admin', '--email', admin.email, '--password', admin.password], env);
const server = await startServer(['src/cli.ts', 'serve'], env, `${base}/healthz`);
let exitCode = 0;
try {
  const world = await seedWorld(base, admin);
  const ops = await operations(base);
  const user = { authorization: `Bearer ${world.userToken}` };
  const root = { authorization: `Bearer ${world.rootToken}` };
  const json = { 'content-type': 'application/json' };
  // something to list and search
  for (let i = 0; i < 3; i++) {
    const f = await uploadThroughApi(base, world.userToken, `seed-${i}.md`, new TextEncoder().encode(`# Notes ${i}\n\nBoundary layers separate at adverse pressure gradients. Note ${i}.`));
    await waitUntilIngested(base, world.userToken, f._id);
  }

  const requests: autocannon.Request[] = [
    { method: 'GET', path: '/api/user/me', headers: user },
    { method: 'GET', path: '/api/user/files', headers: user },
    { method: 'GET', path: '/api/user/me', headers: user },
    { method: 'GET', path: '/api/user/collections', headers: user },
    { method: 'GET', path: '/api/user/institutions', headers: user },
    { method: 'GET', path: '/api/admin/users?pageSize=20', headers: root },
    { method: 'GET', path: '/api/user/me', headers: user },
    { method: 'GET', path: '/api/admin/institutions?pageSize=20', headers: root },
    { method: 'POST', path: '/api/admin/accounts', headers: { ...root, ...json }, body: JSON.stringify({ insitutionsUsage: true }) },
  ];
  const extra: string[] = [];
  if (ops.has('POST /api/user/files/search-content')) {
    requests.push({ method: 'POST', path: '/api/user/files/search-content', headers: { ...user, ...json }, body: JSON.stringify({ query: 'boundary layer separation', limit: 10 }) });
    extra.push('search-content');
  }
  if (ops.has('POST /api/ai/personal/qanda')) {
    requests.push({
      method: 'POST',
      path: '/api/ai/personal/qanda',
      headers: { ...user, ...json },
      body: JSON.stringify({ id: Date.now(), inputs: ['What is a boundary layer?'], outputs: [], requestArgs: { userISODate: new Date().toISOString(), userTimezone: 'UTC', institutionPublicId: world.publicId } }),
    });
    extra.push('Q&A');
  }
  if (ops.has('GET /api/user/memory')) {
    requests.push({ method: 'GET', path: '/api/user/memory', headers: user });
    extra.push('memory');
  }
  // fill up to 19 cheap requests, then one login
  for (let i = requests.length; i < 19; i++) requests.push({ method: 'GET', path: '/api/user/me', headers: user });
  requests.push({ method: 'POST', path: '/api/auth/login', headers: json, body: JSON.stringify({ email: world.userEmail, password: world.password }) });
  console.log(`workload: ${requests.length} requests per cycle (${[...new Set(requests.map((r) => `${r.method} ${r.path}`))].join(', ')})`);
  console.log(`modules not on this build (skipped): ${['search-content', 'Q&A', 'memory'].filter((m) => !extra.includes(m)).join(', ') || 'none'}`);

  const capacityRun = await autocannon({ url: base, connections: 10, duration: 10, requests });
  if (capacityRun.non2xx > 0 || capacityRun.errors > 0) throw new Error(`capacity run: ${capacityRun.non2xx} non-2xx, ${capacityRun.errors} errors`);
  const capacity = capacityRun.requests.average;
  const rate = opts.rate ? Number(opts.rate) : Math.max(1, Math.floor(capacity / 2));
  console.log(`capacity (mixed, 10 connections): ${capacity.toFixed(0)} req/s; soak rate ${rate} req/s for ${minutes} min, warm-up ${warmupMs / 60_000} min\n`);

  // ───── the soak ─────
  type Bucket = { latencies: number[]; errors: number; statuses: Map<number, number> };
  const newBucket = (): Bucket => ({ latencies: [], errors: 0, statuses: new Map() });
  let bucket = newBucket();
  const started = Date.now();
  let totalRequests = 0;
  let totalErrors = 0;
  const rssSamples: Array<{ t: number; rss: number }> = [];
  const report: Array<Record<string, number>> = [];
  let writerErrors = 0;
  let writerCycles = 0;

  const instance = autocannon({ url: base, connections: 10, overallRate: rate, duration: minutes * 60, requests }, () => undefined);
  instance.on('response', (_client, statusCode, _bytes, responseTime) => {
    totalRequests++;
    bucket.latencies.push(responseTime);
    if (statusCode >= 400) {
      bucket.errors++;
      totalErrors++;
      bucket.statuses.set(statusCode, (bucket.statuses.get(statusCode) ?? 0) + 1);
    }
  });
  instance.on('reqError', () => {
    bucket.errors++;
    totalErrors++;
  });
  const finished = new Promise<void>((resolve) => instance.on('done', () => resolve()));

  const sampler = setInterval(() => rssSamples.push({ t: Date.now() - started, rss: rssOf(server.pid!) }), 5000);
  console.log('   t(s)  requests  errors   p50   p95   p99    max  RSS(MB)');
  const reporter = setInterval(() => {
    const b = bucket;
    bucket = newBucket();
    const rss = rssOf(server.pid!);
    const row = {
      t: Math.round((Date.now() - started) / 1000),
      requests: b.latencies.length,
      errors: b.errors,
      p50: Math.round(percentile(b.latencies, 50)),
      p95: Math.round(percentile(b.latencies, 95)),
      p99: Math.round(percentile(b.latencies, 99)),
      max: Math.round(percentile(b.latencies, 100)),
      rssMB: Math.round(rss / 2 ** 20),
    };
    report.push(row);
    const statuses = [...b.statuses].map(([s, n]) => `${s}×${n}`).join(' ');
    console.log(
      `${String(row.t).padStart(7)} ${String(row.requests).padStart(9)} ${String(row.errors).padStart(7)} ${String(row.p50).padStart(5)} ${String(row.p95).padStart(5)} ${String(row.p99).padStart(5)} ${String(row.max).padStart(6)} ${String(row.rssMB).padStart(8)}${statuses ? `  ${statuses}` : ''}`,
    );
  }, intervalMs);

  // the vault writer: upload, wait until indexed, delete; every 10 s
  let writing = true;
  const writer = (async () => {
    while (writing) {
      try {
        const f = await uploadThroughApi(base, world.userToken, `soak-${writerCycles}.md`, new TextEncoder().encode(`# Soak ${writerCycles}\n\n${'Pressure and velocity in the boundary layer. '.repeat(50)}`));
        const done = await waitUntilIngested(base, world.userToken, f._id);
        if (done.status !== 'active') throw new Error(`ended ${done.status}`);
        await api(base, 'DELETE', `/api/user/files/${f._id}`, { token: world.userToken });
        writerCycles++;
      } catch (err) {
        writerErrors++;
        console.error(`vault writer: ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 10_000));
    }
  })();

  await finished;
  writing = false;
  clearInterval(reporter);
  clearInterval(sampler);
  await writer;

  const afterWarmup = rssSamples.filter((s) => s.t >= warmupMs);
  const rssStart = afterWarmup[0]?.rss ?? Number.NaN;
  const rssEnd = rssSamples.at(-1)?.rss ?? Number.NaN;
  const rssMax = Math.max(...afterWarmup.map((s) => s.rss));
  const growth = (rssEnd - rssStart) / rssStart;
  console.log(`\nrequests ${totalRequests}, errors ${totalErrors} (target 0), vault writer ${writerCycles} cycles, ${writerErrors} errors`);
  console.log(`RSS after warm-up ${(rssStart / 2 ** 20).toFixed(0)} MB → end ${(rssEnd / 2 ** 20).toFixed(0)} MB (max ${(rssMax / 2 ** 20).toFixed(0)} MB): growth ${(growth * 100).toFixed(1)}% (target ≤ 10%)`);
  console.log(
    `JSON ${JSON.stringify({ date: new Date().toISOString(), minutes, capacity: Math.round(capacity), rate, totalRequests, totalErrors, writerCycles, writerErrors, rssAfterWarmupMB: Math.round(rssStart / 2 ** 20), rssEndMB: Math.round(rssEnd / 2 ** 20), rssGrowthPct: +(growth * 100).toFixed(1), intervals: report })}`,
  );
  if (totalErrors > 0 || writerErrors > 0 || !(growth <= 0.1)) exitCode = 1;
} finally {
  await stopProcess(server);
  await stub.close();
  rmSync(dataDir, { recursive: true, force: true });
}
process.exit(exitCode);
