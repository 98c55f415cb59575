import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../src/app.js';
import { runCli } from '../src/cli.js';
import { testConfig } from './support/app.js';

/** The CLI against a real temporary data directory (a fresh PGlite on disk, migrated by the CLI). */
describe('CLI', () => {
  let dataDir: string;
  const env = () => ({ NODE_ENV: 'test', DATA_DIR: dataDir, LOG_LEVEL: 'silent', JWT_SECRET: 'cli-secret-cli-secret-cli-secret-0123456789', ENCRYPTION_KEY: 'cli-key-cli-key-cli-key-cli-key-0123456789' });
  const run = async (...argv: string[]) => {
    const lines: string[] = [];
    const code = await runCli(argv, env(), (l) => lines.push(l));
    return { code, output: lines.join('\n') };
  };

  before(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'twin-cli-'));
  });
  after(() => rmSync(dataDir, { recursive: true, force: true }));

  test('create-admin and seed-demo write users that can log in over HTTP', async () => {
    const admin = await run('create-admin', '--email', 'Root@Example.com', '--password', 'root-password-1');
    assert.equal(admin.code, 0);
    assert.match(admin.output, /superadmin Root@Example.com created/);

    const again = await run('create-admin', '--email', 'root@example.com', '--password', 'root-password-2');
    assert.match(again.output, /promoted to superadmin, password reset/);

    const seeded = await run('seed-demo');
    assert.equal(seeded.code, 0);
    assert.match(seeded.output, /demo account "Demo University"/);
    const logins = [...seeded.output.matchAll(/^\s+(\S.*?)\s+(\S+@example\.com) \/ (\S+)$/gm)].map((m) => ({ role: m[1]!.trim(), email: m[2]!, password: m[3]! }));
    assert.equal(logins.length, 7, seeded.output);
    assert.equal(logins.filter((l) => l.role.startsWith('admin')).length, 2);
    assert.equal(logins.filter((l) => l.role.startsWith('user')).length, 4);
    assert.match(seeded.output, /ltiContextId https:\/\/lms\.example\.com\/courses\/physics/);

    await assert.rejects(run('seed-demo'), /demo data already exists/);

    const app = await buildApp({ config: testConfig(dataDir, env()) });
    try {
      const rootLogin = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'root@example.com', password: 'root-password-2' } });
      assert.equal(rootLogin.statusCode, 200);
      assert.equal(rootLogin.json().user.role, 'superadmin');
      for (const l of logins) {
        const res = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: l.email, password: l.password } });
        assert.equal(res.statusCode, 200, `${l.email}: ${res.body}`);
      }
      const user = logins.find((l) => l.role === 'user (history)')!;
      const res = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: user.password } });
      // History does not pool credits: its members received the institution's creditAward
      assert.equal(res.json().user.credits, 500);

      // The seeded course files are ingested by the app's workers; the seeded assistant answers from them.
      assert.match(seeded.output, /assistant "Newton tutor"/);
      const physics = logins.find((l) => l.role === 'user (physics)')!;
      const token = (await app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: physics.email, password: physics.password } })).json().accessToken;
      const deadline = Date.now() + 30_000;
      for (;;) {
        const files = (await app.inject({ method: 'GET', url: '/api/user/files', headers: { 'x-access-token': token } })).json().data;
        if (files.length === 2 && files.every((f: any) => f.status === 'active')) break;
        assert.ok(Date.now() < deadline, `demo files not ingested: ${JSON.stringify(files.map((f: any) => f.status))}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const assistants = (await app.inject({ method: 'GET', url: '/api/user/assistants', headers: { 'x-access-token': token } })).json().data;
      assert.deepEqual(assistants.map((a: any) => a.name), ['Newton tutor']);
      const answer = await app.inject({
        method: 'POST',
        url: '/api/ai/personal/qanda',
        headers: { 'x-access-token': token },
        payload: { id: 1, inputs: ["What does Newton's second law say about force?"], requestArgs: { assistantId: assistants[0]._id } },
      });
      assert.equal(answer.statusCode, 200, answer.body);
      assert.match(answer.json().outputs[0], /F = m a/);
      assert.match(answer.json().outputs[0], /Newton's laws of motion/);
      assert.ok(answer.json().credits > 0);
    } finally {
      await app.close();
    }
  });

  test('create-admin resetting the password of an existing user ends their sessions', async () => {
    await run('create-admin', '--email', 'reset@example.com', '--password', 'reset-password-1');
    let app = await buildApp({ config: testConfig(dataDir, env()) });
    let session: { accessToken: string; refreshToken: string };
    try {
      const res = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'reset@example.com', password: 'reset-password-1' } });
      assert.equal(res.statusCode, 200, res.body);
      session = res.json();
    } finally {
      await app.close();
    }
    const again = await run('create-admin', '--email', 'reset@example.com', '--password', 'reset-password-2');
    assert.match(again.output, /password reset/);
    app = await buildApp({ config: testConfig(dataDir, env()) });
    try {
      const me = await app.inject({ method: 'GET', url: '/api/user/me', headers: { authorization: `Bearer ${session.accessToken}` } });
      assert.equal(me.statusCode, 401, me.body);
      const refreshed = await app.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: session.refreshToken } });
      assert.equal(refreshed.statusCode, 401, refreshed.body);
      const fresh = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'reset@example.com', password: 'reset-password-2' } });
      assert.equal(fresh.statusCode, 200, fresh.body);
    } finally {
      await app.close();
    }
  });

  test('a second process (or handle) cannot open an embedded database that is in use', async () => {
    const app = await buildApp({ config: testConfig(dataDir, env()) });
    try {
      await assert.rejects(run('seed-demo'), /in use by process \d+.*Stop that process first/s);
    } finally {
      await app.close();
    }
    // released on close: the CLI works again
    assert.equal((await run('migrate')).code, 0);
  });

  test('bad arguments are clear errors', async () => {
    await assert.rejects(run('create-admin', '--email', 'nope'), /needs --email/);
    await assert.rejects(run('create-admin', '--email', 'a@b.c', '--password', 'short'), /at least 8 characters/);
    await assert.rejects(run('frobnicate'), /Unknown command "frobnicate"/);
  });
});

describe('bootstrap admin', () => {
  test('BOOTSTRAP_ADMIN_* create the first superadmin on an empty database only', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-boot-'));
    try {
      const { openTestDatabase } = await import('./support/app.js');
      const database = await openTestDatabase();
      const config = testConfig(dataDir, { BOOTSTRAP_ADMIN_EMAIL: 'first@example.com', BOOTSTRAP_ADMIN_PASSWORD: 'first-password' });
      const app = await buildApp({ config, database, skipMigrations: true });
      const res = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'first@example.com', password: 'first-password' } });
      assert.equal(res.statusCode, 200);
      assert.equal(res.json().user.role, 'superadmin');
      await app.close();
      // a second start with other bootstrap values does not add anyone: the database is not empty
      const config2 = testConfig(dataDir, { BOOTSTRAP_ADMIN_EMAIL: 'second@example.com', BOOTSTRAP_ADMIN_PASSWORD: 'second-password' });
      const app2 = await buildApp({ config: config2, database, skipMigrations: true });
      const res2 = await app2.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'second@example.com', password: 'second-password' } });
      assert.equal(res2.statusCode, 401);
      await app2.close();
      await database.close();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
