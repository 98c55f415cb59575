import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { api, freePort, runProcess, SERVER_NODE_FLAGS, startProcess, uploadThroughApi, waitUntilIngested } from '../bench/support.js';
import { preparedDataDir } from './support/server-process.js';

/** `npm start`'s process: listens on PORT, serves, and on SIGTERM finishes in-flight requests before exiting 0. */
test('the server process drains in-flight requests on SIGTERM and exits cleanly', async () => {
  // Restored from the migrated template: a fresh PGlite would spend most of the start-up initialising.
  const dataDir = await preparedDataDir('twin-server-');
  const port = await freePort();
  try {
    const { child } = await startProcess(
      ['src/cli.ts', 'serve'],
      { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', NODE_ENV: 'development', LOG_LEVEL: 'info', BOOTSTRAP_ADMIN_EMAIL: 'srv@example.com', BOOTSTRAP_ADMIN_PASSWORD: 'srv-password-1' },
      /server ready/,
    );
    let logs = '';
    child.stdout?.on('data', (d: Buffer) => (logs += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    assert.equal(ready.status, 200);

    // a login (argon2 verification keeps it in flight for a while), then SIGTERM while it runs
    const inFlight = fetch(`http://127.0.0.1:${port}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'srv@example.com', password: 'srv-password-1' }),
    });
    // SIGTERM once the server has the request (its "incoming request" log line), not after a guessed delay:
    // on a loaded machine a request can take longer than any fixed delay to arrive, and one that arrives
    // after the signal is rightly answered 503
    const deadline = Date.now() + 10_000;
    while (!/"url":"\/api\/auth\/login"/.test(logs) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
    child.kill('SIGTERM');
    const res = await inFlight;
    assert.equal(res.status, 200);
    assert.ok(((await res.json()) as { accessToken?: string }).accessToken);
    assert.equal(await exited, 0);
    assert.match(logs, /shutting down/);
    await assert.rejects(fetch(`http://127.0.0.1:${port}/healthz`));
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

/**
 * `npm start` runs the built JavaScript (scripts/build.mjs → dist/bundle/), not the TypeScript sources: the
 * parts that start other threads and processes from files next to their own (the PGlite worker, the
 * ingestion sandbox) and read files at run time (the migrations) must work from there too.
 */
test('the built server (dist/) starts, ingests a file in its sandbox and finds it', async () => {
  await runProcess(['scripts/build.mjs'], {});
  const dataDir = await preparedDataDir('twin-dist-');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const { child } = await startProcess(
    ['dist/bundle/cli.js', 'serve'],
    // PGLITE_WORKER: the database in its worker thread, as outside tests
    { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', NODE_ENV: 'development', LOG_LEVEL: 'info', PGLITE_WORKER: 'true', BOOTSTRAP_ADMIN_EMAIL: 'dist@example.com', BOOTSTRAP_ADMIN_PASSWORD: 'dist-password-1' },
    /server ready/,
  );
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let exitCode: number | null;
  try {
    const token = (await api(base, 'POST', '/api/auth/login', { body: { email: 'dist@example.com', password: 'dist-password-1' } })).accessToken as string;
    // the packages left out of the bundle because they read files next to their own code
    const docs = await fetch(`${base}/docs/`);
    assert.equal(docs.status, 200);
    assert.match(await docs.text(), /swagger/i);
    const openapi = (await (await fetch(`${base}/openapi.json`)).json()) as { paths: Record<string, unknown> };
    assert.ok(openapi.paths['/api/user/files/search-content']);
    const handshake = await fetch(`${base}/socket.io/?EIO=4&transport=polling`);
    assert.equal(handshake.status, 200);
    assert.match(await handshake.text(), /"sid"/);
    const text = 'The supersonic wind tunnel at Farnborough measured boundary layer transition on swept wings.\n'.repeat(20);
    const upload = await uploadThroughApi(base, token, 'tunnel.txt', new TextEncoder().encode(text));
    const file = await waitUntilIngested(base, token, upload._id, 120_000);
    assert.equal(file.status, 'active');
    const found = await api(base, 'POST', '/api/user/files/search-content', { token, body: { query: 'boundary layer transition' } });
    assert.ok(found.results.length > 0);
    assert.equal(found.results[0].uploadId, upload._id);
  } finally {
    child.kill('SIGTERM');
    exitCode = await exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
  // after the finally: a failure above is reported as itself, not as this
  assert.equal(exitCode, 0);
});

test("npm start runs node with the server's flags, the ones the benchmarks measure with, and this node accepts them", () => {
  const start = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: { start: string } }).scripts.start;
  const command = start.split('&&').at(-1)!.trim().split(/\s+/);
  assert.equal(command[0], 'node', start);
  assert.ok(SERVER_NODE_FLAGS.length > 0);
  for (const flag of SERVER_NODE_FLAGS) assert.ok(command.includes(flag), `npm start passes ${flag}: ${start}`);
  // a flag this node does not know would stop npm start ("bad option")
  const run = spawnSync(process.execPath, [...command.filter((a) => a.startsWith('--')), '-e', 'process.exit(0)'], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
});
