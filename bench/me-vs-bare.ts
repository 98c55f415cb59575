/**
 * req/s of GET /api/user/me (JWT check + session/user/memberships lookup on the embedded database)
 * against a bare Fastify route, in the same run, with autocannon in this process and each server in
 * its own process. Prints both figures and their ratio.
 *
 *   npx tsx bench/me-vs-bare.ts [seconds=10] [connections=10]
 */
import autocannon from 'autocannon';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startServer, stopProcess } from './support.js';

const seconds = Number(process.argv[2] ?? 10);
const connections = Number(process.argv[3] ?? 10);

async function load(url: string, headers: Record<string, string> = {}) {
  const result = await autocannon({ url, connections, duration: seconds, headers });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { reqPerSec: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 };
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
  BOOTSTRAP_ADMIN_EMAIL: 'bench@example.com',
  BOOTSTRAP_ADMIN_PASSWORD: 'bench-password',
};
const app = { child: await startServer(['src/cli.ts', 'serve'], env, `http://127.0.0.1:${appPort}/healthz`) };
const bare = { child: await startServer(['bench/bare-server.ts'], { PORT: String(barePort) }, `http://127.0.0.1:${barePort}/hello`) };
try {
  const loginRes = await fetch(`http://127.0.0.1:${appPort}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'bench@example.com', password: 'bench-password' }),
  });
  const { accessToken } = (await loginRes.json()) as { accessToken: string };

  // warm-up of both, then the measured runs
  await autocannon({ url: `http://127.0.0.1:${barePort}/hello`, connections, duration: 2 });
  await autocannon({ url: `http://127.0.0.1:${appPort}/api/user/me`, connections, duration: 2, headers: { authorization: `Bearer ${accessToken}` } });
  const baseline = await load(`http://127.0.0.1:${barePort}/hello`);
  const me = await load(`http://127.0.0.1:${appPort}/api/user/me`, { authorization: `Bearer ${accessToken}` });

  console.log(`connections=${connections} duration=${seconds}s each`);
  console.log(`bare Fastify GET /hello     ${baseline.reqPerSec.toFixed(0)} req/s  p50 ${baseline.p50} ms  p99 ${baseline.p99} ms`);
  console.log(`GET /api/user/me (PGlite)   ${me.reqPerSec.toFixed(0)} req/s  p50 ${me.p50} ms  p99 ${me.p99} ms`);
  console.log(`ratio me/bare               ${(me.reqPerSec / baseline.reqPerSec).toFixed(3)}`);
} finally {
  await stopProcess(app.child);
  await stopProcess(bare.child);
  rmSync(dataDir, { recursive: true, force: true });
}
