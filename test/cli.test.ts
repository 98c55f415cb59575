import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../bench/support.js';
import { buildApp } from '../src/app.js';
import { runCli } from '../src/cli.js';
import { lockDataDir } from '../src/db/lock.js';
import { testConfig } from './support/app.js';
import { cliEnv, runCliCaptured } from './support/cli.js';
import { preparedDataDir } from './support/server-process.js';

/**
 * `npm run cli -- <args>` as its own process (what an operator sees: the top level's printing and exit
 * code), with only the given environment (and PATH); killed if it runs past `timeoutMs`.
 */
function cliProcess(args: string[], env: Record<string, string>, timeoutMs = 120_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Fails unless the process failed with `message` on stderr and no stack frame anywhere in its output. */
function assertCleanFailure(r: { code: number | null; stdout: string; stderr: string }, message: RegExp): void {
  assert.ok(r.code !== 0 && r.code !== null, `exit code ${r.code}: ${r.stderr}`);
  assert.match(r.stderr, message);
  assert.doesNotMatch(r.stderr, /\n\s+at /, r.stderr);
  assert.doesNotMatch(r.stdout, /\n\s+at /, r.stdout);
}

/** The CLI against a real temporary data directory (a fresh PGlite on disk, migrated by the CLI). */
describe('CLI', () => {
  let dataDir: string;
  const env = () => cliEnv(dataDir);
  const run = (...argv: string[]) => runCliCaptured(env(), argv);

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
    // never on a production deployment (checked before the database is opened)
    await assert.rejects(runCli(['seed-demo'], { ...env(), NODE_ENV: 'production', DATA_DIR: join(dataDir, 'never-made') }, () => undefined), /refused with NODE_ENV=production/);
    assert.equal(existsSync(join(dataDir, 'never-made')), false);
    // as a process: one line, no stack
    const secondProcess = await cliProcess(['seed-demo'], env());
    assertCleanFailure(secondProcess, /^The demo data already exists \(demo\.owner@example\.com\); nothing was changed\.$/m);

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

/**
 * What an operator sees when a command cannot run: one clear line (and the usage for a wrong command line)
 * on stderr, a non-zero exit, no stack trace. Each case fails before the command does any real work.
 */
describe('CLI failures as a process', () => {
  const secrets = { NODE_ENV: 'test', LOG_LEVEL: 'silent', JWT_SECRET: 'cli-secret-cli-secret-cli-secret-0123456789', ENCRYPTION_KEY: 'cli-key-cli-key-cli-key-cli-key-0123456789' };
  let dataDir: string;
  before(async () => {
    // restored from the migrated template: a server process opens it in about a second
    dataDir = await preparedDataDir('twin-cli-fail-');
  });
  after(() => rmSync(dataDir, { recursive: true, force: true }));
  const env = (more: Record<string, string> = {}) => ({ ...secrets, DATA_DIR: dataDir, ...more });

  test('--help and -h print the usage and exit 0', async () => {
    for (const flag of ['--help', '-h']) {
      const r = await cliProcess([flag], env());
      assert.equal(r.code, 0, `${flag}: ${r.stdout}${r.stderr}`);
      assert.match(r.stdout, /^Usage: npm run cli -- <command>/);
      assert.doesNotMatch(r.stdout + r.stderr, /Unknown command/);
    }
  });

  test('a wrong command line is a message and the usage, without a stack', async () => {
    const cases: [string[], RegExp][] = [
      [['create-admin', '--email'], /Option '--email <value>' argument missing/],
      [['create-admin', '--email', 'a@b.c', '--password'], /Option '--password <value>' argument missing/],
      [['seed-demo', '--force'], /Unknown option '--force'/],
      [['migrate', 'now'], /Unexpected argument 'now'/],
      [['frobnicate'], /Unknown command "frobnicate"/],
    ];
    for (const [args, message] of cases) {
      const r = await cliProcess(args, env());
      assertCleanFailure(r, message);
      assert.match(r.stderr, /\n\nUsage: npm run cli -- <command>/, args.join(' '));
    }
  });

  test('serve on a port in use names the address', async () => {
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const { port } = busy.address() as { port: number };
    try {
      const r = await cliProcess(['serve'], env({ PORT: String(port), HOST: '127.0.0.1', INGEST_WORKERS: '0' }));
      assertCleanFailure(r, new RegExp(`^Cannot listen on 127\\.0\\.0\\.1:${port} .*the address is in use \\(EADDRINUSE\\)$`, 'm'));
    } finally {
      await new Promise((resolve) => busy.close(resolve));
    }
  });

  test('an embedded database held by another process is one line naming that process', async () => {
    const pgdata = join(dataDir, 'pgdata');
    mkdirSync(pgdata, { recursive: true });
    const release = lockDataDir(pgdata); // this test process holds it, as a running server would
    try {
      const r = await cliProcess(['create-admin', '--email', 'x@example.com', '--password', 'longenough1'], env());
      assertCleanFailure(r, new RegExp(`is in use by process ${process.pid}\\. Stop that process first`));
    } finally {
      release();
    }
  });

  test('an unreachable DATABASE_URL names the database by host and port, not its password', async () => {
    const port = await freePort(); // just closed: nothing listens there
    const r = await cliProcess(['migrate'], env({ DATABASE_URL: `postgres://twin:pg-secret-pw@127.0.0.1:${port}/twin` }));
    assertCleanFailure(r, new RegExp(`^Cannot reach the database at DATABASE_URL 127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\)$`, 'm'));
    assert.doesNotMatch(r.stderr, /pg-secret-pw/);
  });

  test('REDIS_URL that is not a redis:// URL is a configuration problem', async () => {
    const r = await cliProcess(['serve'], env({ REDIS_URL: 'foo:bar', PORT: '0', HOST: '127.0.0.1' }));
    assertCleanFailure(r, /^Invalid configuration:\n {2}- REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL \(got "foo:bar"\)$/m);
  });

  test('EMBEDDINGS_PROVIDER=onnx with a model path that holds no model fails the start as a configuration problem', async () => {
    const missing = join(dataDir, 'no-model-here');
    const r = await cliProcess(['serve'], env({ EMBEDDINGS_PROVIDER: 'onnx', EMBEDDINGS_MODEL_PATH: missing, PORT: '0', HOST: '127.0.0.1' }));
    assertCleanFailure(r, new RegExp(`^Invalid configuration:\\n {2}- EMBEDDINGS_MODEL_PATH ${missing.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} does not exist$`, 'm'));
  });

  test('an unreachable Redis fails the start naming Redis by host and port, not its password', async () => {
    const port = await freePort(); // just closed: nothing listens there
    const r = await cliProcess(['serve'], env({ REDIS_URL: `redis://:redis-secret-pw@127.0.0.1:${port}`, PORT: '0', HOST: '127.0.0.1', INGEST_WORKERS: '0' }));
    assertCleanFailure(r, new RegExp(`^Cannot reach Redis at REDIS_URL 127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\)$`, 'm'));
    assert.doesNotMatch(r.stderr, /redis-secret-pw/);
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
