import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { io as connect } from 'socket.io-client';
import { freePort, seedWorld, startProcess, uploadThroughApi, type BenchWorld } from '../bench/support.js';
import { openDatabase, rowsOf } from '../src/db/client.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { preparedDataDir } from './support/server-process.js';

/**
 * The graceful shutdown of a server process (SIGTERM), with the model and embedding providers on a local
 * OpenAI-wire stub: what is in flight finishes, or — past SHUTDOWN_TIMEOUT_MS — is stopped cleanly, and the
 * process exits 0 with nothing left half-done in its database.
 */

const ADMIN = { email: 'shutdown@example.com', password: 'shutdown-password-1' };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Server {
  child: ChildProcess;
  base: string;
  dataDir: string;
  exited: Promise<number | null>;
  logs: () => string;
}

async function startServer(stub: OpenAiStub, env: Record<string, string>): Promise<Server> {
  const dataDir = await preparedDataDir('twin-shutdown-');
  const port = await freePort();
  const { child } = await startProcess(
    ['src/cli.ts', 'serve'],
    {
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      NODE_ENV: 'development',
      LOG_LEVEL: 'info',
      BOOTSTRAP_ADMIN_EMAIL: ADMIN.email,
      BOOTSTRAP_ADMIN_PASSWORD: ADMIN.password,
      LLM_PROVIDER: 'openai-compatible',
      LLM_BASE_URL: stub.baseUrl,
      LLM_MODEL: 'gpt-4o-mini',
      LLM_MAX_RETRIES: '0',
      ...env,
    },
    /server ready/,
  );
  let logs = '';
  child.stdout?.on('data', (d: Buffer) => (logs += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, base: `http://127.0.0.1:${port}`, dataDir, exited, logs: () => logs };
}

/** Reads the stopped server's embedded database. */
async function query<T>(dataDir: string, statement: ReturnType<typeof sql>): Promise<T[]> {
  const database = await openDatabase({ pgliteDataDir: join(dataDir, 'pgdata') });
  try {
    return await rowsOf<T>(database.db, statement);
  } finally {
    await database.close();
  }
}

describe('graceful shutdown (SIGTERM)', { timeout: 180_000 }, () => {
  let stub: OpenAiStub;
  before(async () => {
    stub = await startOpenAiStub();
  });
  after(() => stub.close());

  test('a streamed answer in flight finishes: every chunk and its last event reach the socket before it is closed; exit 0', async () => {
    const words = Array.from({ length: 12 }, (_, i) => `word${i}`).join(' ');
    stub.setChatHandler(() => ({ content: words }));
    stub.streamChunkDelayMs(150);
    const server = await startServer(stub, { SHUTDOWN_TIMEOUT_MS: '20000' });
    try {
      const world: BenchWorld = await seedWorld(server.base, ADMIN);
      const socket = connect(server.base, { auth: { token: world.userToken }, transports: ['websocket'], reconnection: false });
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('connect_error', reject);
      });
      const events: { chunk: string; done: boolean; index: number }[] = [];
      let disconnectedAfter = -1;
      socket.on('RECEIVE_STREAM', (e: { chunk: string; done: boolean; index: number }) => events.push(e));
      socket.on('disconnect', () => (disconnectedAfter = events.length));
      const answer = fetch(`${server.base}/api/ai/personal/qanda`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-access-token': world.userToken },
        body: JSON.stringify({ id: 7, inputs: ['Say twelve words'], requestArgs: { socketId: socket.id } }),
      });
      while (events.length === 0) await sleep(5); // streaming has begun
      server.child.kill('SIGTERM');
      const res = await answer;
      assert.equal(res.status, 200);
      const body = (await res.json()) as { outputs: string[]; streamingFailed: boolean };
      assert.equal(body.streamingFailed, false, 'the socket stayed connected to the end of the answer');
      assert.equal(await server.exited, 0, server.logs().slice(-3000));
      assert.ok(events.at(-1)?.done, 'the last event reached the socket');
      assert.equal(
        events
          .filter((e) => !e.done)
          .map((e) => e.chunk)
          .join(''),
        body.outputs.join(''),
      );
      assert.equal(disconnectedAfter, events.length, 'the socket was closed after its last event');
      socket.close();
    } finally {
      stub.streamChunkDelayMs(0);
      stub.setChatHandler(null);
      server.child.kill('SIGKILL');
      rmSync(server.dataDir, { recursive: true, force: true });
    }
  });

  test('a model call still running when SHUTDOWN_TIMEOUT_MS runs out is stopped: 503 with the contract body, its credits released, exit 0', async () => {
    stub.delayMs(60_000);
    const server = await startServer(stub, { SHUTDOWN_TIMEOUT_MS: '3000' });
    try {
      const world: BenchWorld = await seedWorld(server.base, ADMIN);
      const calls = stub.requestsTo('/v1/chat/completions').length;
      const answer = fetch(`${server.base}/api/ai/personal/qanda`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-access-token': world.userToken },
        body: JSON.stringify({ id: 1, inputs: ['A slow question'] }),
      });
      while (stub.requestsTo('/v1/chat/completions').length === calls) await sleep(5); // the model is being asked
      const signalled = performance.now();
      server.child.kill('SIGTERM');
      const res = await answer;
      assert.equal(res.status, 503);
      const body = (await res.json()) as { success: boolean; error: { code: string } };
      assert.equal(body.success, false);
      assert.equal(body.error.code, 'SERVICE_UNAVAILABLE');
      assert.equal(await server.exited, 0, server.logs().slice(-3000));
      const tookMs = performance.now() - signalled;
      assert.ok(tookMs < 60_000, `exited after ${tookMs} ms, not after the model's 60 s`);
      // nothing is held or charged: the reservation was released before the database closed
      const [reservations] = await query<{ n: number }>(server.dataDir, sql`select count(*)::int as n from credit_reservations`);
      assert.equal(reservations?.n, 0);
      // the request's ledger: a reservation and its release, summing to nothing, and no charge
      const ledger = await query<{ kind: string; delta: string }>(server.dataDir, sql`select kind, delta::text as delta from credit_ledger where kind in ('reserve', 'release', 'charge') order by created_at, kind desc`);
      assert.deepEqual(
        ledger.map((row) => row.kind),
        ['reserve', 'release'],
      );
      assert.equal(Number(ledger[0]!.delta) + Number(ledger[1]!.delta), 0, JSON.stringify(ledger));
    } finally {
      stub.delayMs(0);
      server.child.kill('SIGKILL');
      rmSync(server.dataDir, { recursive: true, force: true });
    }
  });

  test('an ingestion running past the job grace is released without using an attempt, and the database is closed after it; exit 0', async () => {
    // every embedding call of the ingestion waits far longer than the shutdown allows
    stub.delayMs(60_000);
    const server = await startServer(stub, {
      SHUTDOWN_TIMEOUT_MS: '4000',
      EMBEDDINGS_PROVIDER: 'openai-compatible',
      EMBEDDINGS_BASE_URL: stub.baseUrl,
      EMBEDDINGS_MODEL: 'stub-embedding',
      EMBEDDINGS_MAX_RETRIES: '0',
    });
    try {
      const world: BenchWorld = await seedWorld(server.base, ADMIN);
      const calls = stub.requestsTo('/v1/embeddings').length;
      const upload = await uploadThroughApi(server.base, world.userToken, 'notes.txt', new TextEncoder().encode('Boundary layers on swept wings.\n'.repeat(40)));
      while (stub.requestsTo('/v1/embeddings').length === calls) await sleep(5); // the job is embedding
      server.child.kill('SIGTERM');
      assert.equal(await server.exited, 0, server.logs().slice(-3000));
      assert.doesNotMatch(server.logs(), /error during shutdown|recording the job's end \(release\) failed/);
      const [job] = await query<{ status: string; attempts: number; locked_by: string | null }>(
        server.dataDir,
        sql`select status, attempts, locked_by from jobs where payload->>'uploadId' = ${upload._id}`,
      );
      assert.deepEqual(job, { status: 'pending', attempts: 0, locked_by: null });
      const [file] = await query<{ status: string }>(server.dataDir, sql`select status from uploads where id = ${upload._id}`);
      assert.equal(file?.status, 'processing', 'the file is ingested again at the next start');
    } finally {
      stub.delayMs(0);
      server.child.kill('SIGKILL');
      rmSync(server.dataDir, { recursive: true, force: true });
    }
  });
});
