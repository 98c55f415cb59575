/**
 * Start-up time of the server on an EXISTING data directory (migrations already applied): from
 * process spawn to the "server ready" log line, over several runs. Also reports the first start
 * (fresh data directory) for comparison.
 *
 *   npx tsx bench/startup.ts [runs=5]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startProcess, stopProcess } from './support.js';

const runs = Number(process.argv[2] ?? 5);
const dataDir = mkdtempSync(join(tmpdir(), 'twin-startup-'));
const env = async () => ({ DATA_DIR: dataDir, PORT: String(await freePort()), HOST: '127.0.0.1', LOG_LEVEL: 'info', NODE_ENV: 'development' });
try {
  const first = await startProcess(['src/cli.ts', 'serve'], await env(), /server ready/);
  await stopProcess(first.child);
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const run = await startProcess(['src/cli.ts', 'serve'], await env(), /server ready/);
    times.push(run.ms);
    await stopProcess(run.child);
  }
  times.sort((a, b) => a - b);
  console.log(`fresh data dir: ${first.ms.toFixed(0)} ms`);
  console.log(`existing data dir over ${runs} runs: median ${times[Math.floor(runs / 2)]!.toFixed(0)} ms, min ${times[0]!.toFixed(0)} ms, max ${times[runs - 1]!.toFixed(0)} ms`);
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}
