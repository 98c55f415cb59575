/**
 * req/s of POST /api/agent/branding (public, cached) and GET /api/user/memory (authenticated, 20 rows)
 * against a bare Fastify route, in the same run: autocannon in this process, each server in its own
 * process. Targets (issue 10): branding ≥ 80 % of bare, memory ≥ 50 % of bare.
 *
 *   npx tsx bench/branding-memory-vs-bare.ts [seconds=10] [connections=10]
 */
import autocannon from 'autocannon';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startServer, stopProcess } from './support.js';

const seconds = Number(process.argv[2] ?? 10);
const connections = Number(process.argv[3] ?? 10);

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
const bare = await startServer(['bench/bare-server.ts'], { PORT: String(barePort) }, `http://127.0.0.1:${barePort}/hello`);
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

  // warm-up, then the measured runs one after another
  for (const r of [bareReq, brandingReq, memoryReq]) await load(r, 2);
  const baseline = await load(bareReq);
  const branding = await load(brandingReq);
  const mem = await load(memoryReq);

  const line = (name: string, r: { reqPerSec: number; p50: number; p99: number }) =>
    `${name.padEnd(34)} ${r.reqPerSec.toFixed(0).padStart(7)} req/s  p50 ${r.p50} ms  p99 ${r.p99} ms  ratio ${(r.reqPerSec / baseline.reqPerSec).toFixed(3)}`;
  console.log(`connections=${connections} duration=${seconds}s each`);
  console.log(line('bare Fastify GET /hello', baseline));
  console.log(line('POST /api/agent/branding (cached)', branding));
  console.log(line('GET /api/user/memory (20 rows)', mem));
} finally {
  await stopProcess(app);
  await stopProcess(bare);
  rmSync(dataDir, { recursive: true, force: true });
}
