/**
 * A model provider that answers a Q&A request with far more than any answer needs (a completion past
 * 16 MiB, a stream that keeps sending) fails the request as an upstream failure: 502 UPSTREAM_FAILED,
 * nothing charged (the reservation released), a failed record; the streaming client gets the last event
 * with the error; the server goes on answering. A moderation answer past its bound is a failed
 * moderation call: the local rules alone decide. The providers are real local HTTP servers speaking the
 * OpenAI wire format, sending real oversized bodies over loopback.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { ClientSockets, listenLocally, streamOn, stubModelEnv, waitFor } from './support/realtime.js';

const MiB = 1024 * 1024;

describe('Q&A: a provider answering past the bounds of what is read', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let stub: OpenAiStub;
  let moderation: OpenAiStub;
  let base: string;
  let token: string;
  const sockets = new ClientSockets();

  before(async () => {
    stub = await startOpenAiStub();
    moderation = await startOpenAiStub();
    t = await startTestApp({ env: stubModelEnv(stub, { LLM_TIMEOUT_MS: '10000', MODERATION_BASE_URL: moderation.baseUrl }) });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
    await t.database.db.execute(sql`update institutions set credits = 1000, max_completion_tokens = 200 where id = ${w.a1.id}`);
    token = (await login(t.app, w.userA1.email)).accessToken;
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
    await stub.close();
    await moderation.close();
  });

  const ask = (body: Record<string, unknown>) => t.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token }, payload: body });
  const balance = async () => Number((await rowsOf<{ credits: string }>(t.database.db, sql`select credits from institutions where id = ${w.a1.id}`))[0]!.credits);
  const ledgerOf = (refId: string) =>
    rowsOf<{ kind: string; delta: string }>(t.database.db, sql`select kind, delta from credit_ledger where ref_id = ${refId} order by created_at, kind`);

  /** As test/conversation-qanda.test.ts: the status and code, the balance as before, a failed record of 0 credits, the reservation released whole. */
  async function expectNothingCharged(res: { statusCode: number; body: string; json(): any }, before: number) {
    assert.equal(res.statusCode, 502, res.body);
    assert.deepEqual(res.json(), { success: false, message: 'The model provider failed; try again later', error: { code: 'UPSTREAM_FAILED', details: [] } });
    assert.equal(await balance(), before);
    const [rec] = await rowsOf<Record<string, any>>(t.database.db, sql`select * from histories where user_id = ${w.userA1.id} order by created_at desc limit 1`);
    assert.equal(rec!.success, false);
    assert.equal(Number(rec!.credits), 0);
    assert.equal(rec!.error_code, 'UPSTREAM_FAILED');
    const ledger = await ledgerOf(rec!.id);
    assert.equal(ledger.reduce((s, l) => s + Number(l.delta), 0), 0);
    assert.deepEqual(ledger.map((l) => l.kind).sort(), ['release', 'reserve']);
  }

  /** A Q&A request answered as usual (the server is fine after the failure). */
  async function expectAnswered(question: string) {
    const res = await ask({ inputs: [question] });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().outputs[0], question);
    return res.json();
  }

  test('a completion larger than 16 MiB: 502 UPSTREAM_FAILED, nothing charged; the next request is answered', async () => {
    const before = await balance();
    stub.padNextAnswer(16 * MiB);
    await expectNothingCharged(await ask({ inputs: ['an answer of 16 MiB'] }), before);
    await expectAnswered('and now a normal one');
  });

  test('a stream that keeps sending: cut past 16 MiB, 502 UPSTREAM_FAILED, the last event carries the error, nothing charged', async () => {
    const before = await balance();
    const socket = await sockets.open(base, token);
    const stream = streamOn(socket);
    const seen = stub.bodies.length;
    stub.floodNextStream(64 * MiB);
    await expectNothingCharged(await ask({ id: 7, inputs: ['an endless stream'], requestArgs: { socketId: socket.id } }), before);
    const events = await stream.done;
    assert.ok(events.length > 1, 'the chunks within the limit were streamed');
    // the last event is the contract's: done, an empty chunk, usage and credits (nothing was paid), and the error
    assert.deepEqual(events.at(-1), { id: 7, chunk: '', index: events.length - 1, done: true, error: 'The model provider failed; try again later', usage: 0, credits: 0 });
    await waitFor(() => stub.bodies.length > seen, 'the stream to end');
    assert.equal(stub.bodies.at(-1)!.hungUp, true, 'the server closed the connection to the provider');
    await expectAnswered('and now a normal one');
  });

  test('a moderation answer larger than its bound (4 MiB) is a failed moderation call: the local rules decide, the answer is given', async () => {
    // the moderation flags everything: read whole, its answer would block the request (422)
    moderation.setModerationHandler(() => true);
    try {
      moderation.padNextAnswer(32 * MiB);
      const seen = moderation.bodies.length;
      const body = await expectAnswered('moderated by an oversized answer');
      assert.ok(body.credits > 0, 'charged as usual');
      await waitFor(() => moderation.bodies.length > seen, 'the moderation answer to end');
      assert.equal(moderation.bodies.at(-1)!.hungUp, true, 'the server closed the connection to the moderation provider');
      // within the bound, the same moderation still blocks
      const blocked = await ask({ inputs: ['moderated by a normal answer'] });
      assert.equal(blocked.statusCode, 422, blocked.body);
      assert.equal(blocked.json().error.code, 'CONTENT_BLOCKED');
    } finally {
      moderation.setModerationHandler(null);
    }
  });
});
