/**
 * A/B of two builds of the server on this machine, in one run: each build serves on its own fresh data
 * directory, with a bare Fastify process (GET /hello, POST /branding) beside them; rounds alternate
 * between all of them (the order reversed every other round), and each reports req/s (autocannon, 10
 * connections) and the server's CPU time per request (utime + stime of the whole process from /proc,
 * Linux only). Two builds measured minutes apart differ by the machine's mood; measured side by side,
 * by the change.
 *
 *   npm run build && cp -r dist dist-a             # the build before the change (e.g. on the commit before)
 *   ...change..., npm run build                   # the build after, in dist/
 *   npx tsx bench/ab.ts dist-a/bundle/cli.js dist/bundle/cli.js [rounds=5] [seconds=3]
 *
 * ROUTES=branding,me,healthz,memory chooses the app's scenarios (default branding,me). Copy the whole dist/
 * directory (the bundle starts the database's worker from dist/db), and inside the project: the bundle
 * imports its packages from the project's node_modules. `dist-*` is ignored by git and the linter.
 */
import autocannon from 'autocannon';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, median, seedMemoryRows, seedWorld, startServer } from './support.js';

const [entryA, entryB, roundsArg, secondsArg] = process.argv.slice(2);
if (!entryA || !entryB) {
  console.error('usage: npx tsx bench/ab.ts <build A cli.js> <build B cli.js> [rounds] [seconds]');
  process.exit(2);
}
const rounds = Number(roundsArg ?? 5);
const seconds = Number(secondsArg ?? 3);
const routes = (process.env.ROUTES ?? 'branding,me').split(',');

/** CPU time (µs) the process has used so far, all its threads. */
function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000; // clock ticks of 10 ms
}

async function startApp(entry: string) {
  const dataDir = mkdtempSync(join(tmpdir(), 'twin-ab-'));
  const port = await freePort();
  const admin = { email: 'ab@example.com', password: 'bench-password' };
  const child = await startServer(
    [entry, 'serve'],
    { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn', NODE_ENV: 'production', JWT_SECRET: 'ab-secret-'.repeat(4), ENCRYPTION_KEY: 'ab-key-'.repeat(8), INGEST_WORKERS: '0', BOOTSTRAP_ADMIN_EMAIL: admin.email, BOOTSTRAP_ADMIN_PASSWORD: admin.password },
    `http://127.0.0.1:${port}/healthz`,
  );
  const base = `http://127.0.0.1:${port}`;
  const world = await seedWorld(base, admin);
  await seedMemoryRows(base, world.userToken);
  const auth = { authorization: `Bearer ${world.userToken}` };
  const scenarios: Record<string, autocannon.Options> = {
    branding: { url: `${base}/api/agent/branding`, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ publicId: world.publicId }) },
    me: { url: `${base}/api/user/me`, headers: auth },
    memory: { url: `${base}/api/user/memory`, headers: auth },
    healthz: { url: `${base}/healthz` },
  };
  return { child, dataDir, scenarios };
}

const a = await startApp(entryA);
const b = await startApp(entryB);
const barePort = await freePort();
const bare = await startServer(['bench/bare-server.ts'], { PORT: String(barePort) }, `http://127.0.0.1:${barePort}/hello`);
const runs: [string, number, autocannon.Options][] = [
  ['bare GET /hello', bare.pid!, { url: `http://127.0.0.1:${barePort}/hello` }],
  ['bare POST /branding', bare.pid!, { url: `http://127.0.0.1:${barePort}/branding`, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ publicId: '3b241101-e2bb-4255-8caf-4136c566a962' }) }],
];
for (const route of routes) {
  const [optionsA, optionsB] = [a.scenarios[route], b.scenarios[route]];
  if (!optionsA || !optionsB) throw new Error(`unknown route ${route}: one of ${Object.keys(a.scenarios).join(', ')}`);
  runs.push([`A ${route}`, a.child.pid!, optionsA], [`B ${route}`, b.child.pid!, optionsB]);
}
try {
  for (const [, , options] of runs) await autocannon({ ...options, connections: 10, duration: 1 }); // warm-up
  const results = new Map<string, { rps: number[]; cpu: number[] }>();
  for (let round = 0; round < rounds; round++) {
    for (const [name, pid, options] of round % 2 ? [...runs].reverse() : runs) {
      const before = cpuMicros(pid);
      const out = await autocannon({ ...options, connections: 10, duration: seconds });
      const used = cpuMicros(pid) - before;
      if (out.non2xx || out.errors) throw new Error(`${name}: ${out.non2xx} non-2xx answers, ${out.errors} errors`);
      const entry = results.get(name) ?? { rps: [], cpu: [] };
      entry.rps.push(out.requests.average);
      entry.cpu.push(used / out.requests.total);
      results.set(name, entry);
    }
  }
  const ceiling = median(results.get('bare GET /hello')!.rps);
  console.log(`${rounds} rounds of ${seconds} s, medians; A = ${entryA}, B = ${entryB}`);
  console.log('| scenario | req/s | / bare GET | server CPU µs a request | CPU per round |\n|---|---|---|---|---|');
  for (const [name, { rps, cpu }] of results) {
    console.log(`| ${name} | ${Math.round(median(rps))} | ${(median(rps) / ceiling).toFixed(3)} | ${median(cpu).toFixed(1)} | ${cpu.map((c) => c.toFixed(1)).join(', ')} |`);
  }
} finally {
  for (const child of [a.child, b.child]) child.kill('SIGTERM');
  bare.kill('SIGTERM');
  for (const dir of [a.dataDir, b.dataDir]) rmSync(dir, { recursive: true, force: true });
}
