import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { freePort, startProcess } from '../bench/support.js';
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
