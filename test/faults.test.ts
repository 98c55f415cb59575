import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { vector } from '@electric-sql/pglite-pgvector';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { eq, sql } from 'drizzle-orm';
import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { freePort, startServer, stopProcess } from '../bench/support.js';
import { buildApp, type App } from '../src/app.js';
import { rowsOf } from '../src/db/client.js';
import { mfaChallenges, sessions } from '../src/db/schema.js';
import { bearer, enrolMfa, login, makeAccount, makeInstitution, makeUser, startTestApp, testConfig, type TestApp } from './support/app.js';
import { CuttableProxy } from './support/cuttable-proxy.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { preparedDataDir } from './support/server-process.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * Issue 7 item 5: faults. Each case ends as documented, with nothing lost and nothing duplicated.
 */

// ───────────── SMTP down ─────────────

/** A real SMTP server on 127.0.0.1 that can go down and come back on the same port. */
async function smtpSink() {
  const received: ParsedMail[] = [];
  let server: SMTPServer | null = null;
  let port = 0;
  const up = async () => {
    server = new SMTPServer({
      authOptional: true,
      disableReverseLookup: true,
      logger: false,
      onData(stream, _session, callback) {
        simpleParser(stream).then(
          (mail) => {
            received.push(mail);
            callback();
          },
          (err: Error) => callback(err),
        );
      },
    });
    await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', () => resolve()));
    port = (server.server.address() as AddressInfo).port;
  };
  await up();
  return {
    received,
    url: () => `smtp://127.0.0.1:${port}/?ignoreTLS=true`,
    up,
    down: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
    codeOf: (mail: ParsedMail) => /(?<!\d)\d{6}(?!\d)/.exec(mail.text ?? '')![0],
  };
}

describe('fault: the SMTP server is down (MFA enrolment and login)', () => {
  test('502 UPSTREAM_FAILED, the challenge counts but can never be used, no session is created; once SMTP is back, one mail, one login', async () => {
    const smtp = await smtpSink();
    const t = await startTestApp({ env: { SMTP_URL: smtp.url(), MFA_CHALLENGES_PER_15_MIN: '5' } });
    try {
      const account = await makeAccount(t.database);
      const user = await makeUser(t.database, { accountId: account.id });
      const { accessToken } = await login(t.app, user.email);
      // enrol while the mail works
      await enrolMfa(t.app, accessToken, () => smtp.codeOf(smtp.received.at(-1)!));

      await smtp.down();
      const sessionsBefore = (await t.database.db.select().from(sessions).where(eq(sessions.userId, user.id))).length;
      const challengesBefore = (await t.database.db.select().from(mfaChallenges).where(eq(mfaChallenges.userId, user.id))).length;
      const mailsBefore = smtp.received.length;

      // login of the enrolled user: the code cannot be sent
      const failed = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: user.password } });
      assert.equal(failed.statusCode, 502, failed.body);
      assert.equal(failed.json().success, false);
      assert.equal(failed.json().error.code, 'UPSTREAM_FAILED');
      // enrolment of another user: the same
      const other = await makeUser(t.database, { accountId: account.id });
      const otherToken = (await login(t.app, other.email)).accessToken;
      await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(otherToken), payload: { mfaEnabled: true } });
      const enrolFailed = await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(otherToken) });
      assert.equal(enrolFailed.statusCode, 502, enrolFailed.body);

      // as documented: the challenge counts toward the limit, is consumed (never usable), and no session exists
      const challenges = await t.database.db.select().from(mfaChallenges).where(eq(mfaChallenges.userId, user.id));
      assert.equal(challenges.length, challengesBefore + 1);
      assert.ok(challenges.every((c) => c.consumedAt !== null));
      assert.equal((await t.database.db.select().from(sessions).where(eq(sessions.userId, user.id))).length, sessionsBefore);

      // SMTP comes back on the same address: exactly one mail for the next login, which completes
      await smtp.up();
      const again = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: user.password } });
      assert.equal(again.statusCode, 200, again.body);
      assert.equal(again.json().mfaRequired, true);
      assert.equal(smtp.received.length, mailsBefore + 1);
      const done = await t.app.inject({ method: 'POST', url: '/api/auth/login/mfa', payload: { challengeId: again.json().challengeId, code: smtp.codeOf(smtp.received.at(-1)!) } });
      assert.equal(done.statusCode, 200, done.body);
      assert.ok(done.json().accessToken);
      assert.equal((await t.database.db.select().from(sessions).where(eq(sessions.userId, user.id))).length, sessionsBefore + 1);
    } finally {
      await t.close();
      await smtp.down();
    }
  });
});

// ───────────── model upstream down during sanitize ─────────────

describe('fault: the model upstream is down during sanitize', () => {
  let stub: OpenAiStub;
  let proxy: CuttableProxy;
  let t: TestApp;
  before(async () => {
    stub = await startOpenAiStub();
    proxy = new CuttableProxy('127.0.0.1', Number(new URL(stub.baseUrl).port));
    await proxy.start();
    t = await startTestApp({
      env: { LLM_PROVIDER: 'openai-compatible', LLM_BASE_URL: `http://127.0.0.1:${proxy.port}/v1`, LLM_MODEL: 'chat-model', LLM_MAX_RETRIES: '1', LLM_TIMEOUT_MS: '5000' },
    });
  });
  after(async () => {
    await t.close();
    await proxy.stop();
    await stub.close();
  });

  test('502 with the contract body, tokens_used and the credit ledger unchanged; after recovery the call is counted once', async () => {
    const account = await makeAccount(t.database);
    const inst = await makeInstitution(t.database, account.id, { summaryModel: 'summary-model' });
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
    const { accessToken } = await login(t.app, user.email);
    const file = await uploadOk(t.app, accessToken, { name: 'notes.txt', type: 'text/plain', content: 'Home > Notes\nThe tide rises twice a day.' }, { scope: 'instance' });
    assert.equal((await waitForIngestion(t.app, accessToken, file._id)).status, 'active');
    const chunks = await t.app.inject({ method: 'GET', url: `/api/user/files/${file._id}/chunks`, headers: bearer(accessToken) });
    const chunkId = chunks.json().data[0]._id as string;
    const ledger = async () => (await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from credit_ledger`))[0]!.n;
    const ledgerBefore = await ledger();

    proxy.cut(); // the provider is unreachable: connections are refused
    const res = await t.app.inject({ method: 'POST', url: `/api/user/embedding/${chunkId}/sanitize`, headers: bearer(accessToken) });
    assert.equal(res.statusCode, 502, res.body);
    assert.deepEqual(res.json(), { success: false, message: 'The model provider failed; try again later', error: { code: 'UPSTREAM_FAILED', details: [] } });
    // the link dies while the request is on its way
    proxy.restore();
    proxy.cutOnNextSend();
    const midway = await t.app.inject({ method: 'POST', url: `/api/user/embedding/${chunkId}/sanitize`, headers: bearer(accessToken) });
    assert.equal(midway.statusCode, 502, midway.body);
    const after1 = await t.app.inject({ method: 'GET', url: `/api/user/files/${file._id}`, headers: bearer(accessToken) });
    assert.equal(after1.json().data.tokens_used, 0);
    assert.equal(await ledger(), ledgerBefore);

    proxy.restore();
    stub.setChatHandler(() => ({ content: 'The tide rises twice a day.', usage: { prompt_tokens: 20, completion_tokens: 7 } }));
    const ok = await t.app.inject({ method: 'POST', url: `/api/user/embedding/${chunkId}/sanitize`, headers: bearer(accessToken) });
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(ok.json().tokensUsed, 27);
    const after2 = await t.app.inject({ method: 'GET', url: `/api/user/files/${file._id}`, headers: bearer(accessToken) });
    assert.equal(after2.json().data.tokens_used, 27);
  });
});

// ───────────── database connection dropped (DATABASE_URL over pglite-socket) ─────────────

describe('fault: the database connection drops mid-request (DATABASE_URL mode)', () => {
  let pglite: PGlite;
  let server: PGLiteSocketServer;
  let proxy: CuttableProxy;
  let app: App;
  let dataDir: string;

  before(async () => {
    pglite = await PGlite.create({ dataDir: 'memory://', extensions: { vector, pg_trgm } });
    server = new PGLiteSocketServer({ db: pglite, port: 0, host: '127.0.0.1', maxConnections: 20 });
    await server.start();
    const [host, port] = server.getServerConn().split(':');
    proxy = new CuttableProxy(host!, Number(port));
    await proxy.start();
    dataDir = mkdtempSync(join(tmpdir(), 'twin-dbfault-'));
    app = await buildApp({
      config: testConfig(dataDir, {
        DATABASE_URL: `postgres://postgres@127.0.0.1:${proxy.port}/postgres`,
        INGEST_WORKERS: '0',
        BOOTSTRAP_ADMIN_EMAIL: 'dbfault@example.com',
        BOOTSTRAP_ADMIN_PASSWORD: 'dbfault-password-1',
      }),
    });
    await app.ready();
  });
  after(async () => {
    // the link comes back first, so that closing the pool never waits on a dead connection (even when the test failed mid-outage)
    proxy.restore();
    await app.close();
    await proxy.stop();
    await server.stop();
    await pglite.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('the request in flight fails with the contract body (no crash); readiness says so; after the database comes back the next requests work; nothing half-written', async () => {
    const { accessToken } = await login(app, 'dbfault@example.com', 'dbfault-password-1');
    const headers = bearer(accessToken);
    assert.equal((await app.inject({ method: 'GET', url: '/api/user/me', headers })).statusCode, 200);

    // the connection dies while the request's query is on the wire; the database stays unreachable
    proxy.cutOnNextSend();
    const failed = await app.inject({ method: 'POST', url: '/api/user/collection', headers, payload: { name: 'Made during the outage', scope: 'personal' } });
    assert.equal(failed.statusCode, 500, failed.body);
    assert.deepEqual(failed.json(), { success: false, message: 'Internal server error', error: { code: 'INTERNAL', details: [] } });
    assert.ok(proxy.cuts > 0);
    // /me is answered by the auth cache (the user row was read before the outage and nothing invalidated
    // it), so the outage does not log anyone out; a route that must read the database fails cleanly.
    const me = await app.inject({ method: 'GET', url: '/api/user/me', headers });
    assert.equal(me.statusCode, 200, me.body);
    assert.equal(me.json().data.email, 'dbfault@example.com');
    const listed = await app.inject({ method: 'GET', url: '/api/user/collections?scope=personal', headers });
    assert.equal(listed.statusCode, 500, listed.body);
    assert.equal(listed.json().error.code, 'INTERNAL');
    assert.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 503);
    assert.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200, 'the process is up');

    // The database is back: new connections, the same app. On PostgreSQL a dropped connection ends its
    // session and the session's prepared statements with it; pglite-socket runs every connection in ONE
    // shared PGlite session, which outlives the socket, so that end of the session is done here by hand
    // (without it the next connection's "prepare" of the auth query meets the old one: 42P05).
    await pglite.exec('DEALLOCATE ALL');
    proxy.restore();
    assert.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
    assert.equal((await app.inject({ method: 'GET', url: '/api/user/me', headers })).statusCode, 200);
    // the cut request wrote nothing; the client's retry creates exactly one
    const list = async () => (await app.inject({ method: 'GET', url: '/api/user/collections?scope=personal', headers })).json().data as Array<{ name: string }>;
    assert.equal((await list()).filter((c) => c.name === 'Made during the outage').length, 0);
    const retry = await app.inject({ method: 'POST', url: '/api/user/collection', headers, payload: { name: 'Made during the outage', scope: 'personal' } });
    assert.equal(retry.statusCode, 201, retry.body);
    assert.equal((await list()).filter((c) => c.name === 'Made during the outage').length, 1);

    // the connections die while idle in the pool: an 'error' event of the pool, which must not end the process
    const cutsBefore = proxy.cuts;
    proxy.cut();
    assert.ok(proxy.cuts > cutsBefore, 'idle pool connections were cut');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    await pglite.exec('DEALLOCATE ALL');
    proxy.restore();
    assert.equal((await app.inject({ method: 'GET', url: '/api/user/me', headers })).statusCode, 200);
  });
});

// ───────────── the process is killed mid-ingestion, then restarted ─────────────

describe('fault: the server process is killed (SIGKILL) mid-ingestion and restarted', () => {
  let child: ChildProcess | undefined;
  let dataDir: string | undefined;
  after(async () => {
    if (child) await stopProcess(child);
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  test('after the restart the file ends active with exactly its chunks: no duplicate, none missing', async () => {
    dataDir = await preparedDataDir('twin-kill-');
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const env = {
      NODE_ENV: 'test',
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      JWT_SECRET: 'kill-secret-kill-secret-kill-secret-0123456',
      ENCRYPTION_KEY: 'kill-encryption-key-kill-encryption-key-012',
      BOOTSTRAP_ADMIN_EMAIL: 'kill@example.com',
      BOOTSTRAP_ADMIN_PASSWORD: 'kill-password-1',
    };
    const start = () => startServer(['src/cli.ts', 'serve'], env, `${base}/readyz`);
    const token = async () => {
      const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'kill@example.com', password: 'kill-password-1' }) });
      return ((await res.json()) as { accessToken: string }).accessToken;
    };
    const getFile = async (tok: string, id: string) => ((await (await fetch(`${base}/api/user/files/${id}`, { headers: bearer(tok) })).json()) as { data: Record<string, any> }).data;
    // ~540 chunks: written in staged batches on PGlite, so the kill lands while some are written and some are not
    const paragraphs = Array.from({ length: 3000 }, (_, i) => `Paragraph ${i} tells of tide number ${i}, of the moon over bay ${i % 97} and of the keeper who logged wave ${i * 7}.`);
    const content = paragraphs.join('\n\n').repeat(2);

    child = await start();
    let tok = await token();
    const form = new FormData();
    form.append('scope', 'personal');
    form.append('file', new Blob([content], { type: 'text/plain' }), 'tides.txt');
    const created = await fetch(`${base}/api/user/files`, { method: 'POST', headers: bearer(tok), body: form });
    assert.equal(created.status, 201);
    const id = ((await created.json()) as { data: { _id: string } }).data._id;

    // wait until the chunks are being written, then kill the process without any chance to clean up
    const deadline = Date.now() + 120_000;
    let seen = await getFile(tok, id);
    while (!(seen.stage === 'indexing' && seen.progress > 90 && seen.progress < 99)) {
      assert.equal(seen.status, 'processing', `ingestion ended before the kill: ${JSON.stringify(seen)}`);
      if (Date.now() > deadline) throw new Error(`never reached indexing: ${JSON.stringify(seen)}`);
      await new Promise((r) => setTimeout(r, 20));
      seen = await getFile(tok, id);
    }
    child.kill('SIGKILL');
    await new Promise((r) => child!.once('exit', r));

    child = await start();
    tok = await token();
    const final = await (async () => {
      const until = Date.now() + 180_000;
      for (;;) {
        const f = await getFile(tok, id);
        if (f.status !== 'processing') return f;
        if (Date.now() > until) throw new Error(`still processing after restart: ${JSON.stringify(f)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    assert.equal(final.status, 'active', JSON.stringify(final));
    assert.ok(final.chunkCount > 200, `chunkCount ${final.chunkCount}: more than ATOMIC_MAX_ROWS, so written in staged batches`);

    // exactly the chunks of the record: indices 0..n-1 once each, and the same as a fresh ingestion of the same bytes
    const indices: number[] = [];
    const texts: string[] = [];
    for (let page = 1; ; page++) {
      const res = await fetch(`${base}/api/user/files/${id}/chunks?page=${page}&pageSize=1000`, { headers: bearer(tok) });
      assert.equal(res.status, 200);
      const body = (await res.json()) as { data: Array<{ index: number; text: string }>; total?: number };
      for (const c of body.data) {
        indices.push(c.index);
        texts.push(c.text);
      }
      if (body.data.length < 1000) break;
    }
    assert.equal(indices.length, final.chunkCount);
    assert.deepEqual(indices, Array.from({ length: final.chunkCount }, (_, i) => i));
    const again = new FormData();
    again.append('scope', 'personal');
    again.append('file', new Blob([content], { type: 'text/plain' }), 'tides-again.txt');
    const second = await fetch(`${base}/api/user/files`, { method: 'POST', headers: bearer(tok), body: again });
    const secondId = ((await second.json()) as { data: { _id: string } }).data._id;
    const until = Date.now() + 180_000;
    let fresh = await getFile(tok, secondId);
    while (fresh.status === 'processing' && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 200));
      fresh = await getFile(tok, secondId);
    }
    assert.equal(fresh.status, 'active');
    assert.equal(fresh.chunkCount, final.chunkCount);
  });
});
