import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../src/db/client.js';

/** The embedded database's lock file: one holder at a time, leftovers of dead owners taken over. */
test('embedded database lock: refuses a second holder, takes over leftovers', async () => {
  const root = mkdtempSync(join(tmpdir(), 'twin-lock-'));
  const dir = join(root, 'pgdata');
  try {
    const first = await openDatabase({ pgliteDataDir: dir });
    // the same folder spelled differently is still the same database
    await assert.rejects(openDatabase({ pgliteDataDir: `${dir}/./` }), /in use by process \d+ \(this one\)/);
    await first.close();

    const lockPath = `${realpathSync(dir)}.lock`;
    // left by an earlier process that had our pid (a restarted container): taken over
    writeFileSync(lockPath, `${process.pid} 1`);
    await (await openDatabase({ pgliteDataDir: dir })).close();
    // a live pid whose process started at another time (the pid was reused): taken over
    writeFileSync(lockPath, '1 999999999999');
    await (await openDatabase({ pgliteDataDir: dir })).close();
    // a dead pid: taken over
    writeFileSync(lockPath, '2147483646');
    const last = await openDatabase({ pgliteDataDir: dir });
    await last.close();
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
