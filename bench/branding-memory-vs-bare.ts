/**
 * req/s of POST /api/agent/branding (public, cached) and GET /api/user/memory (authenticated, 20 rows)
 * against a bare Fastify route, in the same run: autocannon in this process, each server in its own
 * process. Targets (issue 10): branding ≥ 80 % of bare, memory ≥ 50 % of bare. A node:http server without
 * any framework answering the same POST with the same answer and headers shows what a POST costs in Node itself.
 *
 * On a shared, loaded machine one long run per target measures the neighbours as much as the code, so
 * the targets are measured in interleaved rounds (bare, branding, memory, bare, ...) and the report
 * gives the median req/s of each and the median of the per-round ratios.
 *
 *   npx tsx bench/branding-memory-vs-bare.ts [rounds=5] [seconds per round=4] [connections=10]
 */
import autocannon from 'autocannon';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startServer, stopProcess } from './support.js';

const rounds = Number(process.argv[2] ?? 5);
const seconds = Number(process.argv[3] ?? 4);
const connections = Number(process.argv[4] ?? 10);

type Request = { url: string; method?: 'GET' | 'POST'; headers?: Record<string, string>; body?: string };

async function load(r: Request, duration = seconds) {
  const result = await autocannon({ url: r.url, method: r.method ?? 'GET', headers: r.headers, body: r.body, connections, duration });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${r.url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { reqPerSec: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 };
}

async function api(base: string, method: string, path: string, token: string | null, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const json = (await res.json()) as any;
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

const dataDir = mkdtempSync(join(tmpdir(), 'twin-bench-'));
const appPort = await freePort();
const barePort = await freePort();
const rawPort = await freePort();
const env = {
  DATA_DIR: dataDir,
  PORT: String(appPort),
  HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  NODE_ENV: 'development',
  INGEST_WORKERS: '0',
  BOOTSTRAP_ADMIN_EMAIL: 'bench@example.com',
  BOOTSTRAP_ADMIN_PASSWORD: 'bench-password',
};
const app = await startServer(['src/cli.ts', 'serve'], env, `http://127.0.0.1:${appPort}/healthz`);
const bare = await startServer(['bench/bare-server.ts'], { PORT: String(barePort), RAW_PORT: String(rawPort) }, `http://127.0.0.1:${barePort}/hello`);
const base = `http://127.0.0.1:${appPort}`;
try {
  // an account, an institution with branding, a member with 20 memory rows (10 personal, 10 shared)
  let token = (await api(base, 'POST', '/api/auth/login', null, { email: 'bench@example.com', password: 'bench-password' })).accessToken as string;
  const account = (await api(base, 'POST', '/api/admin/account', token, { name: 'Bench' })).data;
  const institution = (
    await api(base, 'POST', '/api/admin/institution', token, { account: account._id, name: 'Bench Institute', ainame: 'Benchy', about: 'Benchmarks', picture: 'https://cdn.example/a.png' })
  ).data;
  const me = (await api(base, 'GET', '/api/user/me', token)).data;
  await api(base, 'POST', '/api/admin/membership', token, { user: me._id ?? me.id, institution: institution._id, role: 'user' });
  token = (await api(base, 'POST', '/api/auth/login', null, { email: 'bench@example.com', password: 'bench-password' })).accessToken;
  for (let i = 0; i < 20; i++) {
    await api(base, 'POST', '/api/user/memory', token, { key_name: `key ${i}`, key_value: `value ${i} `.repeat(8), key_namespace: 'bench', shared: i % 2 === 0, institution: i % 2 === 0 ? institution._id : undefined });
  }
  const memory = await api(base, 'GET', '/api/user/memory', token);
  if (memory.data.length !== 20) throw new Error(`expected 20 memory rows, got ${memory.data.length}`);

  const bareReq: Request = { url: `http://127.0.0.1:${barePort}/hello` };
  const brandingReq: Request = { url: `${base}/api/agent/branding`, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ publicId: institution.publicId }) };
  const memoryReq: Request = { url: `${base}/api/user/memory`, headers: { authorization: `Bearer ${token}` } };
  const rawReq: Request = { ...brandingReq, url: `http://127.0.0.1:${rawPort}/api/agent/branding` };

  // warm-up, then interleaved rounds
  const targets = [
    { name: 'bare Fastify GET /hello', req: bareReq, runs: [] as Array<{ reqPerSec: number; p50: number; p99: number }> },
    { name: 'POST /api/agent/branding (cached)', req: brandingReq, runs: [] as Array<{ reqPerSec: number; p50: number; p99: number }> },
    { name: 'GET /api/user/memory (20 rows)', req: memoryReq, runs: [] as Array<{ reqPerSec: number; p50: number; p99: number }> },
    // the floor of a POST in Node itself: no framework, the branding answer and headers (bench/bare-server.ts)
    { name: 'raw node:http POST (branding answer)', req: rawReq, runs: [] as Array<{ reqPerSec: number; p50: number; p99: number }> },
  ];
  for (const target of targets) await load(target.req, 2);
  for (let round = 0; round < rounds; round++) for (const target of targets) target.runs.push(await load(target.req));

  const median = (xs: number[]) => {
    const sorted = [...xs].sort((a, b) => a - b);
    const mid = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  };
  const bareRuns = targets[0]!.runs;
  console.log(`rounds=${rounds} × ${seconds}s per target, connections=${connections}, load average ${(await import('node:os')).loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  for (const target of targets) {
    const rates = target.runs.map((r) => r.reqPerSec);
    const ratios = target.runs.map((r, i) => r.reqPerSec / bareRuns[i]!.reqPerSec);
    console.log(
      `${target.name.padEnd(34)} median ${median(rates).toFixed(0).padStart(6)} req/s  p50 ${median(target.runs.map((r) => r.p50))} ms  p99 ${median(target.runs.map((r) => r.p99))} ms` +
        `  ratio (median of rounds) ${median(ratios).toFixed(3)}  [${rates.map((r) => r.toFixed(0)).join(' ')}]`,
    );
  }
} finally {
  await stopProcess(app);
  await stopProcess(bare);
  rmSync(dataDir, { recursive: true, force: true });
}
