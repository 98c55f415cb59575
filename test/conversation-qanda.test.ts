import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { sql } from 'drizzle-orm';
import { io as connect, type Socket as ClientSocket } from 'socket.io-client';
import { rowsOf } from '../src/db/client.js';
import { extendReservation, reserveCredits, balanceOf, releaseStaleReservations, settleCredits, ReservationClosedError } from '../src/modules/conversation/credits.repository.js';
import { RESERVATION_STALE_MS, ReservationSweep } from '../src/modules/conversation/reservation-sweep.js';
import {
  ClaimLostError,
  claimIdempotencyKey,
  completeIdempotencyKey,
  deleteExpiredIdempotencyKeys,
  holdIdempotencyKey,
  IDEMPOTENCY_KEY_TTL_MS,
  IDEMPOTENCY_LEASE_MS,
  releaseIdempotencyKey,
  renewIdempotencyLeases,
} from '../src/platform/idempotency.js';
import { RAG_ONLY_NOTHING_FOUND } from '../src/modules/conversation/qanda.service.js';
import { reservationSweep } from '../src/modules/conversation/conversation.routes.js';
import { maxCostUnits, toCredits } from '../src/modules/conversation/pricing.js';
import { countInputTokens, loadEncoding } from '../src/providers/llm/tokens.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { bearer, login, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { streamOn, stubModelEnv, type StreamEvent } from './support/realtime.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

const PATHS = {
  classic: '/api/ai/personal/qanda',
  soul: '/api/ai/experimental/personal/qanda',
  'soul-v2': '/api/ai/experimental/personal/qanda-v2',
} as const;

describe('Q&A pipeline against an OpenAI-compatible SSE server', () => {
  let t: TestApp;
  let w: World;
  let stub: OpenAiStub;
  let base: string;
  const tok: Record<string, string> = {};
  const sockets: ClientSocket[] = [];

  before(async () => {
    stub = await startOpenAiStub();
    t = await startTestApp({
      env: stubModelEnv(stub, {
        LLM_TIMEOUT_MS: '5000',
        MODEL_PRICES: JSON.stringify({ '*': { input: 1, output: 2 }, 'stub-chat': { input: 3, output: 5 }, 'stub-fine': { input: 0.15, output: 0.05 } }),
        CONTENT_FILTER_TERMS: JSON.stringify(['forbiddenword', 'secret plan']),
        MODERATION_BASE_URL: stub.baseUrl,
      }),
    });
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
    w = await makeWorld(t.database);
    // a1 pays from its pool (the default); a2 does not: its members pay from their own balance.
    await t.database.db.execute(sql`update institutions set credits = 1000, max_completion_tokens = 200 where id = ${w.a1.id}`);
    await t.database.db.execute(sql`update institutions set pool_credits = false, max_completion_tokens = 200 where id = ${w.a2.id}`);
    await t.database.db.execute(sql`update users set credits = 50 where id = ${w.userA2.id}`);
    for (const [name, user] of Object.entries({ userA1: w.userA1, adminA1: w.adminA1, userA2: w.userA2, userB1: w.userB1 })) {
      tok[name] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(async () => {
    for (const s of sockets) s.disconnect();
    await t.close();
    await stub.close();
  });

  async function openSocket(token: string): Promise<ClientSocket> {
    const socket = connect(base, { auth: { token }, transports: ['websocket'], reconnection: false });
    sockets.push(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', (err) => reject(err));
    });
    return socket;
  }

  const collect = streamOn;

  const ask = (token: string, body: Record<string, unknown>, path: string = PATHS.classic) =>
    t.app.inject({ method: 'POST', url: path, headers: { 'x-access-token': token }, payload: body });

  const balance = async (table: 'institutions' | 'users', id: string) =>
    Number((await rowsOf<{ credits: string }>(t.database.db, sql`select credits from ${sql.raw(table)} where id = ${id}`))[0]!.credits);

  const ledgerOf = (refId: string) =>
    rowsOf<{ kind: string; delta: string }>(t.database.db, sql`select kind, delta from credit_ledger where ref_id = ${refId} order by created_at, kind`);

  const historyRow = async (id: string) =>
    (await rowsOf<Record<string, any>>(t.database.db, sql`select * from histories where id = ${id}`))[0];

  test('synchronous answer: outputs, provider usage, exact credits, ledger rows and the saved record', async () => {
    stub.setChatHandler(({ lastUserMessage }) => ({ content: `Answer to: ${lastUserMessage}`, usage: { prompt_tokens: 50, completion_tokens: 100 } }));
    const before = await balance('institutions', w.a1.id);
    const res = await ask(tok.userA1!, { id: 1700000000001, inputs: ['What is entropy?'], outputs: [], requestArgs: { userTimezone: 'Europe/Berlin' } });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.deepEqual(body.outputs, ['Answer to: What is entropy?']);
    assert.equal(body.usage, 150);
    // stub-chat costs 3 / 5 credits per 1k: 50 × 3/1000 + 100 × 5/1000 = 0.65
    assert.equal(body.credits, 0.65);
    assert.equal(body.model, 'stub-chat');
    assert.equal(body.streamingFailed, false);
    assert.equal(body.creditsRemaining, before - 0.65);
    assert.equal(body.creditsUsedTotal, 0.65);
    assert.equal(await balance('institutions', w.a1.id), before - 0.65);
    const ledger = await ledgerOf(body.historyId);
    assert.deepEqual(ledger.map((l) => l.kind).sort(), ['charge', 'release', 'reserve']);
    assert.equal(Math.round(ledger.reduce((s, l) => s + Number(l.delta), 0) * 10_000), -6500);
    const rec = await historyRow(body.historyId);
    assert.equal(rec!.success, true);
    assert.equal(Number(rec!.credits), 0.65);
    assert.equal(rec!.prompt_mode, 'classic');
    assert.equal(rec!.experimental, false);
    // The request sent the question last, the system prompt first, the completion budget and usage streaming off (sync).
    const sent = stub.requestsTo('/v1/chat/completions').at(-1)!.body;
    assert.equal(sent.messages[0].role, 'system');
    assert.match(sent.messages[0].content, /Newton/);
    assert.match(sent.messages[0].content, /Europe\/Berlin/);
    assert.equal(sent.messages.at(-1).content, 'What is entropy?');
    assert.equal(sent.max_tokens, 200);
  });

  test('a provider reporting far more than was reserved is charged its actual cost from the balance, and never below zero', async () => {
    // stub-chat costs 3 / 5 credits per 1k: 100,000 × 3/1000 + 10 × 5/1000 = 300.05, far above the reservation
    stub.setChatHandler(() => ({ content: 'x', usage: { prompt_tokens: 100_000, completion_tokens: 10 } }));
    const before = await balance('institutions', w.a1.id);
    assert.ok(before > 300.05, 'the balance covers it');
    const res = await ask(tok.userA1!, { inputs: ['cap me'] });
    assert.equal(res.statusCode, 200, res.body);
    const ledger = await ledgerOf(res.json().historyId);
    const reserved = -Number(ledger.find((l) => l.kind === 'reserve')!.delta);
    assert.ok(reserved < 300.05);
    assert.equal(res.json().credits, 300.05);
    assert.equal(-Number(ledger.find((l) => l.kind === 'charge')!.delta), 300.05);
    assert.equal(Number((await historyRow(res.json().historyId))!.credits), 300.05);
    assert.equal(Math.round((await balance('institutions', w.a1.id)) * 10_000), Math.round((before - 300.05) * 10_000));

    // a balance that covers the reservation but not the cost: all of it is charged, and it ends at zero
    await t.database.db.execute(sql`update institutions set credits = 5 where id = ${w.a1.id}`);
    try {
      const poor = await ask(tok.userA1!, { inputs: ['cap me again'] });
      assert.equal(poor.statusCode, 200, poor.body);
      assert.equal(poor.json().credits, 5);
      assert.equal(poor.json().creditsRemaining, 0);
      assert.equal(await balance('institutions', w.a1.id), 0);
      const rows = await ledgerOf(poor.json().historyId);
      assert.equal(-Number(rows.find((l) => l.kind === 'charge')!.delta), 5);
      assert.equal(Math.round(rows.reduce((sum, l) => sum + Number(l.delta), 0) * 10_000), -50_000, 'the ledger of the request is the 5 credits charged');
      assert.equal(Number((await historyRow(poor.json().historyId))!.credits), 5);
    } finally {
      await t.database.db.execute(sql`update institutions set credits = 1000 where id = ${w.a1.id}`);
    }
  });

  for (const [mode, path] of Object.entries(PATHS)) {
    test(`${mode}: streamed chunks arrive in order on RECEIVE_STREAM and concatenate to outputs`, async () => {
      stub.setChatHandler(() => ({ content: 'One two three four five six seven eight nine ten eleven twelve thirteen.', usage: { prompt_tokens: 50, completion_tokens: 20 } }));
      const socket = await openSocket(tok.userA1!);
      const stream = collect(socket);
      const res = await ask(tok.userA1!, { id: 42, inputs: ['Count for me'], outputs: [], requestArgs: { socketId: socket.id } }, path);
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      const events = await stream.done;
      assert.ok(events.length >= 4, `expected several chunks, got ${events.length}`);
      assert.deepEqual(events.map((e) => e.index), events.map((_, i) => i));
      assert.ok(events.every((e) => e.id === 42));
      const last = events.at(-1)!;
      assert.deepEqual({ done: last.done, chunk: last.chunk, usage: last.usage, credits: last.credits }, { done: true, chunk: '', usage: 70, credits: body.credits });
      assert.equal(events.slice(0, -1).map((e) => e.chunk).join(''), body.outputs[0]);
      assert.equal(body.outputs[0], 'One two three four five six seven eight nine ten eleven twelve thirteen.');
      const sent = stub.requestsTo('/v1/chat/completions').at(-1)!.body;
      assert.equal(sent.stream, true);
      assert.deepEqual(sent.stream_options, { include_usage: true });
      const rec = await historyRow(body.historyId);
      assert.equal(rec!.streamed, true);
      assert.equal(rec!.prompt_mode, mode);
      assert.equal(rec!.experimental, mode !== 'classic');
      // The three generators frame the system prompt differently.
      const system: string = sent.messages[0].content;
      if (mode === 'classic') assert.match(system, /^You are Newton, an AI assistant of Acme Physics/);
      if (mode === 'soul') assert.match(system, /^# Who you are/);
      if (mode === 'soul-v2') assert.match(system, /^<persona>/);
    });
  }

  test('the experimental endpoints stamp experimental and promptMode on the history listing', async () => {
    stub.setChatHandler(null);
    await ask(tok.userA1!, { inputs: ['stamp soul'] }, PATHS.soul);
    await ask(tok.userA1!, { inputs: ['stamp v2'] }, PATHS['soul-v2']);
    const res = await t.app.inject({ method: 'POST', url: '/api/user/histories', headers: { 'x-access-token': tok.userA1! }, payload: { search: '^stamp' } });
    assert.equal(res.statusCode, 200, res.body);
    const data = res.json().data;
    assert.deepEqual(
      data.map((r: any) => [r.in.input, r.experimental, r.promptMode]),
      [
        ['stamp soul', true, 'soul'],
        ['stamp v2', true, 'soul-v2'],
      ],
    );
  });

  test("a socket of another user is never streamed to: the answer is synchronous", async () => {
    stub.setChatHandler(() => 'private answer for A1 only');
    const foreign = await openSocket(tok.userB1!);
    const seen: StreamEvent[] = [];
    foreign.on('RECEIVE_STREAM', (e: StreamEvent) => seen.push(e));
    const res = await ask(tok.userA1!, { id: 7, inputs: ['hello'], requestArgs: { socketId: foreign.id } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().outputs, ['private answer for A1 only']);
    assert.equal((await historyRow(res.json().historyId))!.streamed, false);
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(seen, []);
    // An unknown socket id: synchronous too.
    const res2 = await ask(tok.userA1!, { inputs: ['hello'], requestArgs: { socketId: 'no-such-socket' } });
    assert.equal(res2.statusCode, 200);
    assert.equal(stub.requestsTo('/v1/chat/completions').at(-1)!.body.stream, false);
  });

  test('the handshake needs a valid access token', async () => {
    for (const auth of [{}, { token: 'garbage' }]) {
      const socket = connect(base, { auth, transports: ['websocket'], reconnection: false });
      sockets.push(socket);
      const err = await new Promise<Error>((resolve, reject) => {
        socket.once('connect', () => reject(new Error('connected without a valid token')));
        socket.once('connect_error', (e) => resolve(e));
      });
      assert.equal(err.message, 'UNAUTHENTICATED');
    }
  });

  test('a socket lives no longer than its session: logout closes it with SESSION_ENDED; other sessions and routine invalidations leave sockets alone', async () => {
    const ending = await login(t.app, w.userA1.email);
    const staying = await login(t.app, w.userA1.email);
    const endingSocket = await openSocket(ending.accessToken);
    const stayingSocket = await openSocket(staying.accessToken);
    const closed = new Promise<{ ended: { message: string }; reason: string }>((resolve) => {
      let ended: { message: string } | undefined;
      endingSocket.once('SESSION_ENDED', (e: { message: string }) => (ended = e));
      endingSocket.once('disconnect', (reason) => resolve({ ended: ended!, reason }));
    });
    let stayingDropped = false;
    stayingSocket.once('disconnect', () => (stayingDropped = true));

    // a paid answer invalidates the user's cached row (credits of GET /me): the sockets are checked again and stay
    stub.setChatHandler(() => 'still connected');
    const paid = await ask(ending.accessToken, { inputs: ['hello'], requestArgs: { socketId: endingSocket.id } });
    assert.equal(paid.statusCode, 200, paid.body);
    assert.equal((await historyRow(paid.json().historyId))!.streamed, true);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(endingSocket.connected, true);

    const out = await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(ending.accessToken) });
    assert.equal(out.statusCode, 200, out.body);
    const { ended, reason } = await closed;
    assert.equal(ended.message, 'Session has ended');
    assert.equal(reason, 'io server disconnect');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(stayingDropped, false);
    assert.equal(stayingSocket.connected, true);
    // the ended session's token cannot open a new one
    await assert.rejects(openSocket(ending.accessToken), /UNAUTHENTICATED/);
  });

  test('a logout that commits while a socket handshake reads its session: the socket is refused', async () => {
    const session = await login(t.app, w.userA1.email);
    const cache = t.app.ctx.auth.cache;
    const get = cache.get.bind(cache);
    let armed = true;
    // the handshake's read of the session completes (live), then the logout commits and invalidates before the
    // handshake goes on: the order a slower database (or another node's logout) gives
    cache.get = (async (...args: Parameters<typeof cache.get>) => {
      const entry = await get(...args);
      if (armed) {
        armed = false;
        const out = await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(session.accessToken) });
        assert.equal(out.statusCode, 200, out.body);
      }
      return entry;
    }) as typeof cache.get;
    try {
      await assert.rejects(openSocket(session.accessToken), /UNAUTHENTICATED/);
      assert.equal(armed, false);
    } finally {
      cache.get = get;
    }
  });

  test('a socket that disconnects mid-answer: streamingFailed with streamingError, and the full output', async () => {
    stub.setChatHandler(() => ({ content: Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ') }));
    stub.streamChunkDelayMs(15);
    try {
      const socket = await openSocket(tok.userA1!);
      let got = 0;
      socket.on('RECEIVE_STREAM', () => {
        if (++got === 2) socket.disconnect();
      });
      const res = await ask(tok.userA1!, { id: 9, inputs: ['long one'], requestArgs: { socketId: socket.id } });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.equal(body.streamingFailed, true);
      assert.match(body.streamingError, /disconnected/);
      assert.equal(body.outputs[0], Array.from({ length: 40 }, (_, i) => `word${i}`).join(' '));
      assert.ok(body.credits > 0);
    } finally {
      stub.streamChunkDelayMs(0);
    }
  });

  async function expectNothingCharged(res: { statusCode: number; body: string; json(): any }, status: number, code: string, before: number) {
    assert.equal(res.statusCode, status, res.body);
    assert.equal(res.json().error.code, code);
    assert.equal(await balance('institutions', w.a1.id), before);
    const [rec] = await rowsOf<Record<string, any>>(t.database.db, sql`select * from histories where user_id = ${w.userA1.id} order by created_at desc limit 1`);
    assert.equal(rec!.success, false);
    assert.equal(Number(rec!.credits), 0);
    assert.equal(rec!.error_code, code);
    const ledger = await ledgerOf(rec!.id);
    assert.equal(ledger.reduce((s, l) => s + Number(l.delta), 0), 0);
    assert.deepEqual(ledger.map((l) => l.kind).sort(), ['release', 'reserve']);
  }

  test('upstream 5xx: 502, nothing charged, the reservation released, record success false', async () => {
    stub.setChatHandler(null);
    const before = await balance('institutions', w.a1.id);
    stub.failNext(2, 500); // the moderation call (which fails open: local rules still apply) and the model call
    await expectNothingCharged(await ask(tok.userA1!, { inputs: ['will fail'] }), 502, 'UPSTREAM_FAILED', before);
  });

  test('upstream timeout: 502, nothing charged', async () => {
    const before = await balance('institutions', w.a1.id);
    stub.delayMs(5500);
    try {
      await expectNothingCharged(await ask(tok.userA1!, { inputs: ['too slow'] }), 502, 'UPSTREAM_FAILED', before);
    } finally {
      stub.delayMs(0);
    }
  });

  test('a stream dropped mid-way: 502, nothing charged, the client is told the stream ended', async () => {
    stub.setChatHandler(() => 'alpha beta gamma delta epsilon zeta eta theta iota kappa');
    const before = await balance('institutions', w.a1.id);
    const socket = await openSocket(tok.userA1!);
    const stream = collect(socket);
    stub.dropNextStreamAfter(2);
    await expectNothingCharged(await ask(tok.userA1!, { id: 5, inputs: ['drop me'], requestArgs: { socketId: socket.id } }), 502, 'UPSTREAM_FAILED', before);
    const events = await stream.done;
    // the last event is the contract's: done, an empty chunk, usage and credits (nothing was paid), and an error
    assert.deepEqual(events.at(-1), { id: 5, chunk: '', index: events.length - 1, done: true, error: 'The model provider failed; try again later', usage: 0, credits: 0 });
  });

  test('content filter: a local term and the provider moderation both give 422, nothing charged', async () => {
    const before = await balance('institutions', w.a1.id);
    const calls = stub.requestsTo('/v1/chat/completions').length;
    await expectNothingCharged(await ask(tok.userA1!, { inputs: ['tell me the Secret   Plan'.replace('   ', ' ')] }), 422, 'CONTENT_BLOCKED', before);
    await expectNothingCharged(await ask(tok.userA1!, { inputs: ['a FORBIDDENWORD here'] }), 422, 'CONTENT_BLOCKED', before);
    // the earlier answers a client sends back go to the model as the assistant's turns: they are checked too
    await expectNothingCharged(await ask(tok.userA1!, { inputs: ['first question', 'and then?'], outputs: ['an answer with forbiddenword in it'] }), 422, 'CONTENT_BLOCKED', before);
    stub.setModerationHandler((text) => text.includes('hateful'));
    try {
      await expectNothingCharged(await ask(tok.userA1!, { inputs: ['something hateful'] }), 422, 'CONTENT_BLOCKED', before);
    } finally {
      stub.setModerationHandler(null);
    }
    assert.equal(stub.requestsTo('/v1/chat/completions').length, calls, 'the model is never called for blocked input');
    // A word that merely contains a term is not blocked, nor an output the request does not send to the model.
    assert.equal((await ask(tok.userA1!, { inputs: ['forbiddenwords are fine'] })).statusCode, 200);
    assert.equal((await ask(tok.userA1!, { inputs: ['only question'], outputs: ['forbiddenword, never sent'] })).statusCode, 200);
  });

  test("402 when the balance cannot cover the maximum cost; the user's own balance pays outside pools", async () => {
    const broke = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a2.id]: 'user' } });
    const token = (await login(t.app, broke.email)).accessToken;
    const calls = stub.requestsTo('/v1/chat/completions').length;
    const res = await ask(token, { inputs: ['anything'] });
    assert.equal(res.statusCode, 402, res.body);
    assert.equal(res.json().error.code, 'INSUFFICIENT_CREDITS');
    assert.equal(stub.requestsTo('/v1/chat/completions').length, calls);
    // userA2 (a2 does not pool) pays from its own 50 credits.
    stub.setChatHandler(() => ({ content: 'ok', usage: { prompt_tokens: 100, completion_tokens: 10 } }));
    const before = await balance('users', w.userA2.id);
    const paid = await ask(tok.userA2!, { inputs: ['who pays?'] });
    assert.equal(paid.statusCode, 200, paid.body);
    assert.equal(paid.json().credits, 0.35);
    assert.equal(await balance('users', w.userA2.id), before - 0.35);
    assert.equal(paid.json().creditsRemaining, before - 0.35);
  });

  test('the reservation is the maximum cost of the prompt as sent, its passages counted once: a balance of exactly that is enough', async () => {
    await loadEncoding();
    const para = (i: number) => `Section ${i}. The zorblax reactor of station ${i} turns plasma into flux; engineers calibrate the zorblax reactor every cycle and log the flux readings and the coolant pressure.`;
    const file = await uploadOk(t.app, tok.userA2!, { name: 'zorblax.txt', content: Array.from({ length: 40 }, (_, i) => para(i)).join('\n\n'), type: 'text/plain' }, { scope: 'instance', institution: w.a2.id });
    assert.equal((await waitForIngestion(t.app, tok.userA2!, file._id)).status, 'active');
    stub.setChatHandler(() => ({ content: 'ok', usage: { prompt_tokens: 10, completion_tokens: 10 } }));
    const question = { inputs: ['How is the zorblax reactor calibrated?'] };
    const start = await balance('users', w.userA2.id);
    const first = await ask(tok.userA2!, question);
    assert.equal(first.statusCode, 200, first.body);
    const sent = stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages as Array<{ role: 'system' | 'user' | 'assistant'; content: string }>;
    assert.ok((sent[0]!.content.match(/\[\d+\] \(zorblax\.txt/g) ?? []).length >= 2, 'the prompt carries several passages');
    // userA2 pays from its own balance (a2 does not pool); a2's completion budget is 200 tokens; stub-chat costs 3 / 5
    const most = toCredits(maxCostUnits(countInputTokens(sent), 200, { input: 3, output: 5 }));
    const [reserve] = (await ledgerOf(first.json().historyId)).filter((l) => l.kind === 'reserve');
    assert.equal(-Number(reserve!.delta), most);
    // the same request with a balance of exactly its maximum cost is answered; a ten-thousandth less is not
    await t.database.db.execute(sql`update users set credits = ${most} where id = ${w.userA2.id}`);
    const second = await ask(tok.userA2!, question);
    assert.equal(second.statusCode, 200, second.body);
    assert.deepEqual(stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages, sent);
    await t.database.db.execute(sql`update users set credits = ${most - 0.0001} where id = ${w.userA2.id}`);
    const third = await ask(tok.userA2!, question);
    assert.equal(third.statusCode, 402, third.body);
    await t.database.db.execute(sql`update users set credits = ${start} where id = ${w.userA2.id}`);
    await t.app.inject({ method: 'DELETE', url: `/api/user/files/${file._id}`, headers: bearer(tok.userA2!) });
  });

  test('validation: blank question, unknown time zone, foreign institution, invisible assistant', async () => {
    assert.equal((await ask(tok.userA1!, { inputs: ['  '] })).statusCode, 400);
    assert.equal((await ask(tok.userA1!, { inputs: [] })).statusCode, 400);
    const tz = await ask(tok.userA1!, { inputs: ['hi'], requestArgs: { userTimezone: 'Mars/Olympus' } });
    assert.equal(tz.statusCode, 400);
    assert.match(tz.json().message, /time zone/);
    assert.equal((await ask(tok.userA1!, { inputs: ['hi'], requestArgs: { institutionPublicId: w.b1.publicId } })).statusCode, 403);
    assert.equal((await ask(tok.userA1!, { inputs: ['hi'], requestArgs: { institutionPublicId: '6f1c1d9e-9b8e-4c7e-8d6a-0a1b2c3d4e5f' } })).statusCode, 404);
    assert.equal((await ask(tok.userA1!, { inputs: ['hi'], requestArgs: { assistantId: '0190a0a0-0000-7000-8000-000000000000' } })).statusCode, 404);
    assert.equal((await ask('garbage', { inputs: ['hi'] })).statusCode, 401);
  });

  test('retrieval grounds the prompt; ragIgnore skips it; ragOnly with nothing found answers so without a model call', async () => {
    const file = await uploadOk(t.app, tok.userA1!, { name: 'thermo.txt', content: 'The zeroth law of thermodynamics defines thermal equilibrium between bodies.\n', type: 'text/plain' }, { scope: 'instance' });
    assert.equal((await waitForIngestion(t.app, tok.userA1!, file._id)).status, 'active');
    stub.setChatHandler(null);
    await ask(tok.userA1!, { inputs: ['What does the zeroth law define?'] });
    let system: string = stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages[0].content;
    assert.match(system, /\[1\] \(thermo\.txt, part 1\)\nThe zeroth law of thermodynamics/);
    await ask(tok.userA1!, { inputs: ['What does the zeroth law define?'], requestArgs: { ragIgnore: true } });
    system = stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages[0].content;
    assert.doesNotMatch(system, /zeroth law of thermodynamics/);
    // userB1 cannot see A1's file: nothing is retrieved for it.
    await ask(tok.userB1!, { inputs: ['What does the zeroth law define?'] }).then((r) => assert.equal(r.statusCode, 402)); // b1 has no credits
    const calls = stub.requestsTo('/v1/chat/completions').length;
    const res = await ask(tok.userA1!, { inputs: ['quantum chromodynamics gluons'], requestArgs: { ragOnly: true } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().outputs, [RAG_ONLY_NOTHING_FOUND]);
    assert.equal(res.json().credits, 0);
    assert.equal(stub.requestsTo('/v1/chat/completions').length, calls);
  });

  test("an assistant's ragCollections restrict retrieval; disableAssistantsForUser and assistantsDisabled refuse its use", async () => {
    const coll = await t.app.inject({ method: 'POST', url: '/api/user/collection', headers: bearer(tok.userA1!), payload: { name: 'Optics only', scope: 'instance' } });
    assert.equal(coll.statusCode, 201, coll.body);
    const collectionId = coll.json().data._id;
    const inside = await uploadOk(t.app, tok.userA1!, { name: 'lenses.txt', content: 'Converging lenses focus parallel light rays at the focal point of the lens.\n', type: 'text/plain' }, { scope: 'instance', collection: collectionId });
    const outside = await uploadOk(t.app, tok.userA1!, { name: 'mirrors.txt', content: 'Concave mirrors also focus parallel light rays at a focal point.\n', type: 'text/plain' }, { scope: 'instance' });
    for (const f of [inside, outside]) assert.equal((await waitForIngestion(t.app, tok.userA1!, f._id)).status, 'active');
    const created = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(tok.userA1!), payload: { name: 'Optics', ragCollections: [collectionId] } });
    assert.equal(created.statusCode, 201, created.body);
    const assistantId = created.json().data._id;
    stub.setChatHandler(null);
    assert.equal((await ask(tok.userA1!, { inputs: ['How do parallel light rays focus?'], requestArgs: { assistantId } })).statusCode, 200);
    let system: string = stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages[0].content;
    assert.match(system, /lenses\.txt/);
    assert.doesNotMatch(system, /mirrors\.txt/);
    assert.match(system, /Assistant "Optics" instructions/);
    await ask(tok.userA1!, { inputs: ['How do parallel light rays focus?'] });
    system = stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages[0].content;
    assert.match(system, /mirrors\.txt/, 'without the assistant the whole vault is searched');

    await t.database.db.execute(sql`update institutions set disable_assistants_for_user = true where id = ${w.a1.id}`);
    try {
      const refused = await ask(tok.userA1!, { inputs: ['hi'], requestArgs: { assistantId } });
      assert.equal(refused.statusCode, 403, refused.body);
      assert.equal((await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(tok.userA1!), payload: { name: 'Nope' } })).statusCode, 403);
    } finally {
      await t.database.db.execute(sql`update institutions set disable_assistants_for_user = false where id = ${w.a1.id}`);
    }
    await t.database.db.execute(sql`update institutions set assistants_disabled = ${`{${assistantId}}`}::text[] where id = ${w.a1.id}`);
    try {
      assert.equal((await ask(tok.userA1!, { inputs: ['hi'], requestArgs: { assistantId } })).statusCode, 403);
    } finally {
      await t.database.db.execute(sql`update institutions set assistants_disabled = '{}' where id = ${w.a1.id}`);
    }
    assert.equal((await ask(tok.userA1!, { inputs: ['hi'], requestArgs: { assistantId } })).statusCode, 200);
  });

  test('institutionPublicId: retrieval and the vault_search tool search the asked institution (the role there from its membership), not the current one', async () => {
    // A member of two institutions of one account: North (current, admin there) and South (user there), a file in each.
    const north = await makeInstitution(t.database, w.accountA.id, { name: 'North Campus', ainame: 'Boreas' });
    const south = await makeInstitution(t.database, w.accountA.id, { name: 'South Campus', ainame: 'Notus' });
    await t.database.db.execute(sql`update institutions set credits = 100 where id in (${north.id}, ${south.id})`);
    const both = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [north.id]: 'admin', [south.id]: 'user' } });
    const token = (await login(t.app, both.email)).accessToken;
    const northFile = await uploadOk(t.app, token, { name: 'north-glaciers.txt', content: 'Glacier valleys near the North Campus are U-shaped, carved by moving ice.\n', type: 'text/plain' }, { scope: 'instance' });
    const southFile = await uploadOk(t.app, token, { name: 'south-glaciers.txt', content: 'Glacier valleys near the South Campus are hanging valleys above the fjords.\n', type: 'text/plain' }, { scope: 'instance', institution: south.id });
    for (const f of [northFile, southFile]) assert.equal((await waitForIngestion(t.app, token, f._id)).status, 'active');
    const systemPrompt = () => stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages[0].content as string;
    stub.setChatHandler(null);

    // Without institutionPublicId: the current institution (North) is searched.
    const atHome = await ask(token, { inputs: ['What shape are the glacier valleys?'] });
    assert.equal(atHome.statusCode, 200, atHome.body);
    assert.match(systemPrompt(), /\(north-glaciers\.txt, part 1\)\nGlacier valleys near the North Campus/);
    assert.doesNotMatch(systemPrompt(), /south-glaciers\.txt|South Campus/);

    // Asked in South: South's file grounds the answer, North's does not; billed and recorded in South with the South role.
    const southBefore = await balance('institutions', south.id);
    const inSouth = await ask(token, { inputs: ['What shape are the glacier valleys?'], requestArgs: { institutionPublicId: south.publicId } });
    assert.equal(inSouth.statusCode, 200, inSouth.body);
    assert.match(systemPrompt(), /\(south-glaciers\.txt, part 1\)\nGlacier valleys near the South Campus/);
    assert.doesNotMatch(systemPrompt(), /north-glaciers\.txt|North Campus/);
    assert.ok((await balance('institutions', south.id)) < southBefore, 'South pays');
    const rec = await historyRow(inSouth.json().historyId);
    assert.equal(rec!.institution_id, south.id);
    assert.equal(rec!.role_name, 'user', 'the role of the membership in South, not the admin role of North');

    // The vault_search tool searches the same scope (an assistant of South offering every tool).
    const created = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(token), payload: { name: 'Geo', institution: south.id, assistantToolMode: 'all' } });
    assert.equal(created.statusCode, 201, created.body);
    stub.setChatHandler(({ body }) => {
      const last = body.messages.at(-1);
      if (last.role === 'tool') return { content: `Found: ${last.content}` };
      return { content: '', toolCalls: [{ name: 'vault_search', arguments: '{"query":"glacier valleys"}' }] };
    });
    const tooled = await ask(token, { inputs: ['Look up the glacier valleys'], requestArgs: { institutionPublicId: south.publicId, assistantId: created.json().data._id, ragIgnore: true } });
    assert.equal(tooled.statusCode, 200, tooled.body);
    const toolRec = await historyRow(tooled.json().historyId);
    assert.equal(toolRec!.tool_calls[0].tool, 'vault_search');
    assert.match(toolRec!.tool_calls[0].response, /south-glaciers\.txt/);
    assert.doesNotMatch(toolRec!.tool_calls[0].response, /north-glaciers\.txt|North Campus/);
    stub.setChatHandler(null);

    // Still no way into an institution without a membership there.
    const foreign = await ask(token, { inputs: ['What shape are the glacier valleys?'], requestArgs: { institutionPublicId: w.a2.publicId } });
    assert.equal(foreign.statusCode, 403, foreign.body);
  });

  test("the institution's conversation model is asked for, priced and recorded; o-series models get max_completion_tokens", async () => {
    await t.database.db.execute(sql`update institutions set conversation_model = 'o3-mini' where id = ${w.a1.id}`);
    try {
      stub.setChatHandler(() => ({ content: 'reasoned', usage: { prompt_tokens: 100, completion_tokens: 100 } }));
      const res = await ask(tok.userA1!, { inputs: ['which model?'] });
      assert.equal(res.statusCode, 200, res.body);
      const sent = stub.requestsTo('/v1/chat/completions').at(-1)!.body;
      assert.equal(sent.model, 'o3-mini');
      assert.equal(sent.max_completion_tokens, 200);
      assert.equal(sent.max_tokens, undefined);
      assert.equal(res.json().model, 'o3-mini');
      assert.equal(res.json().credits, 0.3, 'o3-mini is not in MODEL_PRICES: the "*" price (1 / 2 per 1k)');
      assert.equal((await historyRow(res.json().historyId))!.conversation_model, 'o3-mini');
    } finally {
      await t.database.db.execute(sql`update institutions set conversation_model = null where id = ${w.a1.id}`);
    }
  });

  test('selectedCourse threads the history of the same course and assistant; forgotten turns are skipped', async () => {
    stub.setChatHandler(({ lastUserMessage }) => `reply to ${lastUserMessage}`);
    const course = { course_id: 77, course_name: 'Thermo', assistant: {} };
    const first = await ask(tok.userA1!, { inputs: ['turn one'], requestArgs: { selectedCourse: course } });
    await ask(tok.userA1!, { inputs: ['turn two'], requestArgs: { selectedCourse: course } });
    await ask(tok.userA1!, { inputs: ['other course'], requestArgs: { selectedCourse: { ...course, course_id: 78 } } });
    await ask(tok.userA1!, { inputs: ['turn three'], requestArgs: { selectedCourse: course } });
    let messages = stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages.map((m: any) => `${m.role}:${m.content}`);
    assert.deepEqual(messages.slice(1), ['user:turn one', 'assistant:reply to turn one', 'user:turn two', 'assistant:reply to turn two', 'user:turn three']);
    const patch = await t.app.inject({ method: 'PATCH', url: `/api/user/history/${first.json().historyId}`, headers: bearer(tok.userA1!), payload: { forgotten: true } });
    assert.equal(patch.statusCode, 200, patch.body);
    await ask(tok.userA1!, { inputs: ['turn four'], requestArgs: { selectedCourse: course } });
    messages = stub.requestsTo('/v1/chat/completions').at(-1)!.body.messages.map((m: any) => `${m.role}:${m.content}`);
    assert.ok(!messages.includes('user:turn one'));
    assert.ok(messages.includes('user:turn three'));
  });

  /** An assistant of a1 (made by its admin, shared) offered every tool; its id. */
  const toolAssistant = async (name: string): Promise<string> => {
    const created = await t.app.inject({
      method: 'POST',
      url: '/api/user/assistant',
      headers: bearer(tok.adminA1!),
      payload: { name, instructions: 'Use tools.', institution_shared: true, assistantToolMode: 'all' },
    });
    assert.equal(created.statusCode, 201, created.body);
    return created.json().data._id;
  };

  test('tools: function calls are run (streamed arguments included), kept on the record, and removed by toolsDisabled', async () => {
    const assistantId = await toolAssistant('Tool user');
    stub.setChatHandler(({ body }) => {
      const last = body.messages.at(-1);
      if (last.role === 'tool') return { content: `The tool said: ${last.content}`, usage: { prompt_tokens: 300, completion_tokens: 10 } };
      return { content: '', toolCalls: [{ name: 'current_datetime', arguments: '{"timezone":"Asia/Tokyo"}' }], usage: { prompt_tokens: 200, completion_tokens: 5 } };
    });
    const socket = await openSocket(tok.userA1!);
    const stream = collect(socket);
    const res = await ask(tok.userA1!, { id: 11, inputs: ['what time is it?'], requestArgs: { assistantId, socketId: socket.id } });
    assert.equal(res.statusCode, 200, res.body);
    await stream.done;
    const body = res.json();
    assert.match(body.outputs[0], /^The tool said: .*Asia\/Tokyo/);
    assert.equal(body.usage, 515, 'usage sums every model call');
    assert.equal(body.credits, Math.ceil(((200 + 300) * 3 + (5 + 10) * 5) / 1000 * 10_000) / 10_000);
    const firstCall = stub.requestsTo('/v1/chat/completions').at(-2)!.body;
    assert.deepEqual(firstCall.tools.map((x: any) => x.function.name), ['vault_search', 'memory_lookup', 'current_datetime']);
    const rec = await historyRow(body.historyId);
    assert.equal(rec!.tool_calls[0].tool, 'current_datetime');
    assert.deepEqual(rec!.tool_calls[0].arguments, { timezone: 'Asia/Tokyo' });
    assert.match(rec!.tool_calls[0].response, /Asia\/Tokyo/);
    // The listing cuts tool responses to 80 characters unless tools: true.
    const list = async (tools: boolean) =>
      (await t.app.inject({ method: 'POST', url: '/api/user/histories', headers: bearer(tok.userA1!), payload: { historyId: body.historyId, tools } })).json().data[0].tools[0].response;
    assert.equal((await list(false)).length, Math.min(80, rec!.tool_calls[0].response.length));
    assert.equal(await list(true), rec!.tool_calls[0].response);

    await t.database.db.execute(sql`update institutions set tools_disabled = '{current_datetime,memory_lookup}' where id = ${w.a1.id}`);
    stub.setChatHandler(() => 'no tools now');
    await ask(tok.userA1!, { inputs: ['again'], requestArgs: { assistantId } });
    assert.deepEqual(stub.requestsTo('/v1/chat/completions').at(-1)!.body.tools.map((x: any) => x.function.name), ['vault_search']);
    await t.database.db.execute(sql`update institutions set tools_disabled = '{}' where id = ${w.a1.id}`);
  });

  test("a tool the model was not offered (the institution's toolsDisabled, an assistant's selected list) is not run: the model is told it is not available", async () => {
    const file = await uploadOk(t.app, tok.userA1!, { name: 'payroll.txt', content: 'The confidential payroll code is ZEBRA-4471 for all staff salaries.\n', type: 'text/plain' }, { scope: 'instance' });
    assert.equal((await waitForIngestion(t.app, tok.userA1!, file._id)).status, 'active');
    const memory = await t.app.inject({ method: 'POST', url: '/api/user/memory', headers: bearer(tok.userA1!), payload: { key_name: 'locker', key_value: 'locker combination 31-07-19' } });
    assert.equal(memory.statusCode, 201, memory.body);
    // the model answers with what the tools said
    const toolsSaid = (calls: Array<{ name: string; arguments: string }>) => (input: { body: any }) => {
      const messages = input.body.messages;
      if (messages.at(-1).role === 'tool') {
        const said = messages.filter((m: { role: string }) => m.role === 'tool').map((m: { content: string }) => m.content);
        return { content: `Tools said: ${said.join(' | ')}`, usage: { prompt_tokens: 20, completion_tokens: 10 } };
      }
      return { content: '', toolCalls: calls, usage: { prompt_tokens: 20, completion_tokens: 5 } };
    };
    const offeredIn = (request: { body: any }) => request.body.tools.map((x: any) => x.function.name);
    const toolCallsOf = async (historyId: string) => (await historyRow(historyId))!.tool_calls.map((c: { tool: string; response: string }) => [c.tool, c.response]);

    // the institution disables vault_search: an assistant of every tool is offered the two others only
    await t.database.db.execute(sql`update institutions set tools_disabled = '{vault_search}' where id = ${w.a1.id}`);
    try {
      const all = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(tok.userA1!), payload: { name: 'Every tool', assistantToolMode: 'all' } });
      assert.equal(all.statusCode, 201, all.body);
      stub.setChatHandler(toolsSaid([{ name: 'vault_search', arguments: '{"query":"payroll code"}' }]));
      const res = await ask(tok.userA1!, { inputs: ['search my documents for the payroll code'], requestArgs: { assistantId: all.json().data._id, ragIgnore: true } });
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(offeredIn(stub.requestsTo('/v1/chat/completions').at(-2)!), ['memory_lookup', 'current_datetime']);
      assert.deepEqual(res.json().outputs, ['Tools said: Error: tool vault_search is not available']);
      assert.deepEqual(await toolCallsOf(res.json().historyId), [['vault_search', 'Error: tool vault_search is not available']]);
    } finally {
      await t.database.db.execute(sql`update institutions set tools_disabled = '{}' where id = ${w.a1.id}`);
    }

    // an assistant of the clock only: the vault and the memory stay closed, the clock (called in the same round) runs
    const clock = await t.app.inject({
      method: 'POST',
      url: '/api/user/assistant',
      headers: bearer(tok.userA1!),
      payload: { name: 'Clock only', assistantToolMode: 'selected', assistantTools: [{ tool: 'current_datetime' }] },
    });
    assert.equal(clock.statusCode, 201, clock.body);
    stub.setChatHandler(
      toolsSaid([
        { name: 'vault_search', arguments: '{"query":"payroll code"}' },
        { name: 'memory_lookup', arguments: '{"term":"locker"}' },
        { name: 'current_datetime', arguments: '{"timezone":"Asia/Tokyo"}' },
      ]),
    );
    const res = await ask(tok.userA1!, { inputs: ['payroll code, locker combination and the time?'], requestArgs: { assistantId: clock.json().data._id, ragIgnore: true } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(offeredIn(stub.requestsTo('/v1/chat/completions').at(-2)!), ['current_datetime']);
    const calls = await toolCallsOf(res.json().historyId);
    assert.deepEqual(calls.slice(0, 2), [
      ['vault_search', 'Error: tool vault_search is not available'],
      ['memory_lookup', 'Error: tool memory_lookup is not available'],
    ]);
    assert.equal(calls[2][0], 'current_datetime');
    assert.match(calls[2][1], /Asia\/Tokyo/);
    assert.doesNotMatch(res.json().outputs[0], /ZEBRA-4471|31-07-19/);
  });

  test('the calls of a tool round are priced exactly and rounded up once: two calls with a fraction of a credit unit each', async () => {
    const assistantId = await toolAssistant('Fine-priced tool user');
    // stub-fine costs 0.15 / 0.05 credits per 1k tokens: 1.5 / 0.5 units of 0.0001 a token
    stub.setChatHandler(({ body }) => {
      const last = body.messages.at(-1);
      if (last.role === 'tool') return { content: 'done', model: 'stub-fine', usage: { prompt_tokens: 301, completion_tokens: 10 } };
      return { content: '', model: 'stub-fine', toolCalls: [{ name: 'current_datetime', arguments: '{"timezone":"UTC"}' }], usage: { prompt_tokens: 201, completion_tokens: 4 } };
    });
    const res = await ask(tok.userA1!, { inputs: ['what time is it?'], requestArgs: { assistantId, ragIgnore: true } });
    assert.equal(res.statusCode, 200, res.body);
    // exactly 303.5 + 456.5 = 760 units: 0.076 (each call rounded up on its own would be 304 + 457 = 0.0761)
    assert.equal(res.json().credits, 0.076);
    assert.equal(Number((await historyRow(res.json().historyId))!.credits), 0.076, 'the record says the same');
  });

  test('an assistant deleted while its answer is made: 200, paid as usual, the record kept without the assistant', async () => {
    const created = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(tok.userA1!), payload: { name: 'Short-lived' } });
    assert.equal(created.statusCode, 201, created.body);
    const assistantId = created.json().data._id;
    stub.setChatHandler(async () => {
      const removed = await t.app.inject({ method: 'DELETE', url: `/api/user/assistant/${assistantId}`, headers: bearer(tok.userA1!) });
      assert.equal(removed.statusCode, 200, removed.body);
      return { content: 'still answered', usage: { prompt_tokens: 100, completion_tokens: 20 } };
    });
    const before = await balance('institutions', w.a1.id);
    const res = await ask(tok.userA1!, { inputs: ['who am I talking to?'], requestArgs: { assistantId, ragIgnore: true } });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    // stub-chat: 100 × 3/1000 + 20 × 5/1000 = 0.4
    assert.equal(body.credits, 0.4);
    assert.equal(Math.round((await balance('institutions', w.a1.id)) * 10_000), Math.round((before - 0.4) * 10_000));
    assert.deepEqual((await ledgerOf(body.historyId)).map((l) => l.kind).sort(), ['charge', 'release', 'reserve']);
    const rec = await historyRow(body.historyId);
    assert.equal(rec!.assistant_id, null);
    assert.deepEqual(rec!.outputs, ['still answered']);
  });

  test('a model call failing after a tool round: 502, the completed round paid, the rest of the reservation released, the round kept on the failed record', async () => {
    const created = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(tok.userA1!), payload: { name: 'Tool then fail', assistantToolMode: 'all' } });
    assert.equal(created.statusCode, 201, created.body);
    stub.setChatHandler(({ body }) => {
      if (body.messages.at(-1).role === 'tool') throw new Error('the second call fails');
      return { content: '', toolCalls: [{ name: 'current_datetime', arguments: '{"timezone":"UTC"}' }], usage: { prompt_tokens: 200, completion_tokens: 5 } };
    });
    const before = await balance('institutions', w.a1.id);
    const socket = await openSocket(tok.userA1!);
    const stream = collect(socket);
    const res = await ask(tok.userA1!, { id: 9, inputs: ['what time is it, twice?'], requestArgs: { assistantId: created.json().data._id, ragIgnore: true, socketId: socket.id } });
    assert.equal(res.statusCode, 502, res.body);
    // the provider's words ("the second call fails") stay in the log
    assert.deepEqual(res.json(), { success: false, message: 'The model provider failed; try again later', error: { code: 'UPSTREAM_FAILED', details: [] } });
    // the stream's last event tells the client what the failed answer used and cost
    assert.deepEqual((await stream.done).at(-1), { id: 9, chunk: '', index: 0, done: true, error: 'The model provider failed; try again later', usage: 205, credits: 0.625 });
    // the first call: 200 × 3/1000 + 5 × 5/1000 = 0.625
    assert.equal(Math.round((await balance('institutions', w.a1.id)) * 10_000), Math.round((before - 0.625) * 10_000));
    const [rec] = await rowsOf<Record<string, any>>(t.database.db, sql`select * from histories where user_id = ${w.userA1.id} order by created_at desc, id desc limit 1`);
    assert.equal(rec!.success, false);
    assert.equal(rec!.error_code, 'UPSTREAM_FAILED');
    assert.equal(Number(rec!.credits), 0.625);
    // the paid round's call is on the record, as on the 402's
    assert.deepEqual(rec!.tool_calls.map((c: { tool: string; arguments: unknown }) => [c.tool, c.arguments]), [['current_datetime', { timezone: 'UTC' }]]);
    const ledger = await ledgerOf(rec!.id);
    assert.deepEqual(ledger.map((l) => l.kind).sort(), ['charge', 'release', 'reserve', 'reserve']);
    assert.equal(Math.round(ledger.reduce((sum, l) => sum + Number(l.delta), 0) * 10_000), -6250);
  });

  test('a tool round the balance cannot cover: 402, the completed call paid, the rest released, the round kept on a failed record', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Thin', ainame: 'Thin', maxCompletionTokens: 100 });
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const token = (await login(t.app, member.email)).accessToken;
    await t.database.db.execute(sql`update institutions set credits = 100 where id = ${inst.id}`);
    const created = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(token), payload: { name: 'Clock', assistantToolMode: 'all' } });
    assert.equal(created.statusCode, 201, created.body);
    const assistantId = created.json().data._id;
    // the first reservation of this question, from a probe answered without tools
    stub.setChatHandler(() => ({ content: 'no tools today', usage: { prompt_tokens: 10, completion_tokens: 1 } }));
    const probe = await ask(token, { inputs: ['what time is it?'], requestArgs: { assistantId, ragIgnore: true } });
    assert.equal(probe.statusCode, 200, probe.body);
    const [reserve] = await ledgerOf(probe.json().historyId).then((rows) => rows.filter((r) => r.kind === 'reserve'));
    const first = -Number(reserve!.delta);
    // enough for the first call's reservation, not for the tool round's
    await t.database.db.execute(sql`update institutions set credits = ${first + 0.001} where id = ${inst.id}`);
    stub.setChatHandler(() => ({ content: '', toolCalls: [{ name: 'current_datetime', arguments: '{"timezone":"UTC"}' }], usage: { prompt_tokens: 200, completion_tokens: 5 } }));
    const res = await ask(token, { inputs: ['what time is it?'], requestArgs: { assistantId, ragIgnore: true } });
    assert.equal(res.statusCode, 402, res.body);
    assert.equal(res.json().error.code, 'INSUFFICIENT_CREDITS');
    // the first call: 200 × 3/1000 + 5 × 5/1000 = 0.625
    assert.equal(Math.round((await balance('institutions', inst.id)) * 10_000), Math.round((first + 0.001 - 0.625) * 10_000));
    const [rec] = await rowsOf<Record<string, any>>(t.database.db, sql`select * from histories where user_id = ${member.id} order by created_at desc, id desc limit 1`);
    assert.equal(rec!.success, false);
    assert.equal(rec!.error_code, 'INSUFFICIENT_CREDITS');
    assert.equal(Number(rec!.credits), 0.625);
    assert.equal(rec!.usage, 205);
    assert.deepEqual(rec!.tool_calls.map((c: { tool: string }) => c.tool), ['current_datetime']);
    const ledger = await ledgerOf(rec!.id);
    assert.deepEqual(ledger.map((l) => l.kind).sort(), ['charge', 'release', 'reserve']);
    assert.equal(Math.round(ledger.reduce((sum, l) => sum + Number(l.delta), 0) * 10_000), -6250);
    assert.equal((await rowsOf(t.database.db, sql`select 1 from credit_reservations where ref_id = ${rec!.id}`)).length, 0, 'nothing left open');
  });

  test('the institution deleted during the answer (its record cannot be saved): 409 CONFLICT, and the reservation still ends: only what the model consumed is paid', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { poolCredits: false, maxCompletionTokens: 200 });
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' }, fields: { credits: '20' } });
    const token = (await login(t.app, member.email)).accessToken;
    stub.setChatHandler(async () => {
      await t.database.db.execute(sql`delete from institutions where id = ${inst.id}`);
      return { content: 'answered into the void', usage: { prompt_tokens: 100, completion_tokens: 20 } };
    });
    const res = await ask(token, { inputs: ['anyone there?'], requestArgs: { ragIgnore: true } });
    assert.equal(res.statusCode, 409, res.body);
    assert.equal(res.json().error.code, 'CONFLICT');
    assert.match(res.json().message, /deleted while it was being generated/);
    // the member's own balance paid the consumption (0.4) and got the rest of the reservation back
    assert.equal(Math.round((await balance('users', member.id)) * 10_000), 196_000);
    const ledger = await rowsOf<{ kind: string; delta: string }>(t.database.db, sql`select kind, delta from credit_ledger where user_id = ${member.id} order by kind`);
    assert.deepEqual(ledger.map((l) => l.kind), ['charge', 'release', 'reserve']);
    assert.equal(Math.round(ledger.reduce((sum, l) => sum + Number(l.delta), 0) * 10_000), -4000);
  });

  describe('Idempotency-Key', () => {
    const askWithKey = (token: string, key: string, body: Record<string, unknown>, path: string = PATHS.classic) =>
      t.app.inject({ method: 'POST', url: path, headers: { 'x-access-token': token, 'idempotency-key': key }, payload: body });
    const historiesOf = async (userId: string, input: string) =>
      (await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from histories where user_id = ${userId} and input = ${input}`))[0]!.n;

    test('a retry with the same key and request gets the first response again: one model call, one charge, one record; the socket id and key order may differ', async () => {
      stub.setChatHandler(() => ({ content: 'Paid once.', usage: { prompt_tokens: 100, completion_tokens: 10 } }));
      const calls = stub.requestsTo('/v1/chat/completions').length;
      const before = await balance('institutions', w.a1.id);
      const first = await askWithKey(tok.userA1!, 'retry-1', { id: 1700000000100, inputs: ['pay me once'], requestArgs: { userTimezone: 'UTC', ragIgnore: true } });
      assert.equal(first.statusCode, 200, first.body);
      assert.equal(first.headers['idempotent-replayed'], undefined);
      const afterFirst = await balance('institutions', w.a1.id);
      assert.ok(afterFirst < before);
      const retry = await askWithKey(tok.userA1!, 'retry-1', { requestArgs: { ragIgnore: true, userTimezone: 'UTC', socketId: 'not-connected' }, inputs: ['pay me once'], id: 1700000000100 });
      assert.equal(retry.statusCode, 200, retry.body);
      assert.equal(retry.headers['idempotent-replayed'], 'true');
      assert.deepEqual(retry.json(), first.json());
      assert.equal(stub.requestsTo('/v1/chat/completions').length, calls + 1, 'the retry made no model call');
      assert.equal(await balance('institutions', w.a1.id), afterFirst, 'the retry charged nothing');
      assert.equal(await historiesOf(w.userA1.id, 'pay me once'), 1);
      assert.deepEqual((await ledgerOf(first.json().historyId)).map((l) => l.kind).sort(), ['charge', 'release', 'reserve']);
      // the same request without the key, or under another key, is a new request
      const fresh = await askWithKey(tok.userA1!, 'retry-2', { id: 1700000000100, inputs: ['pay me once'], requestArgs: { userTimezone: 'UTC', ragIgnore: true } });
      assert.equal(fresh.statusCode, 200, fresh.body);
      assert.notEqual(fresh.json().historyId, first.json().historyId);
      assert.equal(await historiesOf(w.userA1.id, 'pay me once'), 2);
    });

    test('a keyed request nesting deeper than the fingerprint walks is a 400 that changes nothing (it was a 500: a stack overflow)', async () => {
      const before = await balance('institutions', w.a1.id);
      const calls = stub.requestsTo('/v1/chat/completions').length;
      const deep = `{"inputs":["too deep"],"requestArgs":{"ragIgnore":true},"extra":${'['.repeat(5000)}${']'.repeat(5000)}}`;
      const res = await t.app.inject({ method: 'POST', url: PATHS.classic, headers: { 'x-access-token': tok.userA1!, 'idempotency-key': 'deep-1', 'content-type': 'application/json' }, payload: deep });
      assert.equal(res.statusCode, 400, res.body);
      assert.deepEqual(res.json(), { success: false, message: 'A request with an Idempotency-Key may nest at most 64 levels deep', error: { code: 'VALIDATION_FAILED', details: [] } });
      assert.equal(stub.requestsTo('/v1/chat/completions').length, calls);
      assert.equal(await balance('institutions', w.a1.id), before);
      assert.equal(await historiesOf(w.userA1.id, 'too deep'), 0);
    });

    test('the same key with another request is a 400 that changes nothing; keys are per user and per endpoint', async () => {
      stub.setChatHandler(() => ({ content: 'Keyed.', usage: { prompt_tokens: 10, completion_tokens: 2 } }));
      const first = await askWithKey(tok.userA1!, 'shared-key', { inputs: ['first question'], requestArgs: { ragIgnore: true } });
      assert.equal(first.statusCode, 200, first.body);
      const before = await balance('institutions', w.a1.id);
      const other = await askWithKey(tok.userA1!, 'shared-key', { inputs: ['another question'], requestArgs: { ragIgnore: true } });
      assert.equal(other.statusCode, 400, other.body);
      assert.equal(other.json().error.code, 'VALIDATION_FAILED');
      assert.equal(other.json().error.details[0].field, 'Idempotency-Key');
      const otherEndpoint = await askWithKey(tok.userA1!, 'shared-key', { inputs: ['first question'], requestArgs: { ragIgnore: true } }, PATHS.soul);
      assert.equal(otherEndpoint.statusCode, 400, otherEndpoint.body);
      assert.equal(await balance('institutions', w.a1.id), before);
      assert.equal(await historiesOf(w.userA1.id, 'another question'), 0);
      // another user's key of the same name is theirs
      const mine = await askWithKey(tok.userA2!, 'shared-key', { inputs: ['first question'], requestArgs: { ragIgnore: true } });
      assert.equal(mine.statusCode, 200, mine.body);
      assert.equal(mine.headers['idempotent-replayed'], undefined);
      assert.notEqual(mine.json().historyId, first.json().historyId);
    });

    test('a retry while the first request runs is a 409 with Retry-After; after it, the replay', async () => {
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      stub.setChatHandler(async () => {
        await gate;
        return { content: 'Slow answer.', usage: { prompt_tokens: 10, completion_tokens: 3 } };
      });
      const calls = stub.requestsTo('/v1/chat/completions').length;
      const running = askWithKey(tok.userA1!, 'slow-1', { inputs: ['take your time'], requestArgs: { ragIgnore: true } });
      for (let i = 0; i < 500 && stub.requestsTo('/v1/chat/completions').length === calls; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(stub.requestsTo('/v1/chat/completions').length, calls + 1, 'the first request reached the model');
      const during = await askWithKey(tok.userA1!, 'slow-1', { inputs: ['take your time'], requestArgs: { ragIgnore: true } });
      assert.equal(during.statusCode, 409, during.body);
      assert.equal(during.json().error.code, 'CONFLICT');
      assert.equal(during.headers['retry-after'], '1');
      open();
      const first = await running;
      assert.equal(first.statusCode, 200, first.body);
      const after = await askWithKey(tok.userA1!, 'slow-1', { inputs: ['take your time'], requestArgs: { ragIgnore: true } });
      assert.equal(after.statusCode, 200, after.body);
      assert.equal(after.json().historyId, first.json().historyId);
      assert.equal(stub.requestsTo('/v1/chat/completions').length, calls + 1);
    });

    test('a request that fails gives its key back: the retry is answered afresh and paid once', async () => {
      stub.setChatHandler(() => ({ content: 'Second time lucky.', usage: { prompt_tokens: 10, completion_tokens: 4 } }));
      stub.failNext(2, 500); // the moderation call (fails open) and the model call
      const failed = await askWithKey(tok.userA1!, 'flaky-1', { inputs: ['try again'], requestArgs: { ragIgnore: true } });
      assert.equal(failed.statusCode, 502, failed.body);
      const before = await balance('institutions', w.a1.id);
      const retry = await askWithKey(tok.userA1!, 'flaky-1', { inputs: ['try again'], requestArgs: { ragIgnore: true } });
      assert.equal(retry.statusCode, 200, retry.body);
      assert.equal(retry.headers['idempotent-replayed'], undefined);
      assert.deepEqual(retry.json().outputs, ['Second time lucky.']);
      assert.equal(Math.round((before - (await balance('institutions', w.a1.id))) * 10_000), Math.round(retry.json().credits * 10_000));
      const replay = await askWithKey(tok.userA1!, 'flaky-1', { inputs: ['try again'], requestArgs: { ragIgnore: true } });
      assert.equal(replay.headers['idempotent-replayed'], 'true');
      assert.equal(replay.json().historyId, retry.json().historyId);
    });

    test('a replay naming a connected socket streams the saved answer to it in one piece, then the last event', async () => {
      stub.setChatHandler(() => ({ content: 'Streamed before the reconnect.', usage: { prompt_tokens: 10, completion_tokens: 5 } }));
      const first = await askWithKey(tok.userA1!, 'stream-1', { id: 77, inputs: ['stream it'], requestArgs: { ragIgnore: true } });
      assert.equal(first.statusCode, 200, first.body);
      const socket = await openSocket(tok.userA1!);
      const stream = collect(socket);
      const replay = await askWithKey(tok.userA1!, 'stream-1', { id: 77, inputs: ['stream it'], requestArgs: { ragIgnore: true, socketId: socket.id } });
      assert.equal(replay.statusCode, 200, replay.body);
      assert.equal(replay.json().streamingFailed, false);
      const events = await stream.done;
      assert.deepEqual(
        events.map((e) => [e.id, e.index, e.chunk, e.done]),
        [
          [77, 0, 'Streamed before the reconnect.', false],
          [77, 1, '', true],
        ],
      );
      assert.deepEqual([events[1]!.usage, events[1]!.credits], [first.json().usage, first.json().credits]);
    });

    test('keys out of bounds are a 400 before anything runs', async () => {
      for (const key of ['x'.repeat(256), 'has space', 'tab\there']) {
        const res = await askWithKey(tok.userA1!, key, { inputs: ['bounds'], requestArgs: { ragIgnore: true } });
        assert.equal(res.statusCode, 400, `${JSON.stringify(key)}: ${res.body}`);
        assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      }
      assert.equal(await historiesOf(w.userA1.id, 'bounds'), 0);
    });

    test('a claim whose holder stops renewing its lease is taken over once it lapses; the first holder can then neither complete nor release it; a finished key expires after 24 hours (and the sweep deletes it)', async () => {
      const now = new Date('2030-01-01T00:00:00Z');
      const first = { userId: w.userB1.id, key: 'died', holder: 'holder-1' };
      const claimed = await claimIdempotencyKey(t.database.db, w.userB1.id, 'died', 'f1', 'holder-1', now);
      assert.deepEqual(claimed, { state: 'claimed', holder: 'holder-1', tookOverFrom: null });
      // renewed within its lease, the claim is held however long the request runs
      let at = now.getTime();
      for (let i = 0; i < 5; i++) {
        at += IDEMPOTENCY_LEASE_MS - 1;
        assert.deepEqual(await claimIdempotencyKey(t.database.db, w.userB1.id, 'died', 'f1', 'holder-x', new Date(at)), { state: 'running' });
        assert.equal(await renewIdempotencyLeases(t.database.db, [first], new Date(at)), 1);
      }
      // its holder goes silent: one lease later the key is the next request's
      const late = new Date(at + IDEMPOTENCY_LEASE_MS + 1);
      assert.deepEqual(await claimIdempotencyKey(t.database.db, w.userB1.id, 'died', 'f1', 'holder-2', late), { state: 'claimed', holder: 'holder-2', tookOverFrom: 'holder-1' });
      // the first holder, finishing after the takeover, neither completes, holds, renews nor releases the new claim
      await assert.rejects(completeIdempotencyKey(t.database.db, first, { stale: true }), ClaimLostError);
      await assert.rejects(holdIdempotencyKey(t.database.db, first), ClaimLostError);
      assert.equal(await renewIdempotencyLeases(t.database.db, [first], late), 0);
      await releaseIdempotencyKey(t.database.db, first);
      assert.deepEqual(await claimIdempotencyKey(t.database.db, w.userB1.id, 'died', 'f1', 'holder-3', late), { state: 'running' });
      const second = { userId: w.userB1.id, key: 'died', holder: 'holder-2' };
      await holdIdempotencyKey(t.database.db, second);
      await completeIdempotencyKey(t.database.db, second, { ok: 1 });
      // a completed key is no lease: it is replayed, however long after, until it expires
      const day = new Date(late.getTime() + IDEMPOTENCY_KEY_TTL_MS - 1);
      assert.deepEqual(await claimIdempotencyKey(t.database.db, w.userB1.id, 'died', 'f1', 'holder-4', day), { state: 'replay', response: { ok: 1 } });
      const keyRows = async () => (await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from idempotency_keys where user_id = ${w.userB1.id}`))[0]!.n;
      await deleteExpiredIdempotencyKeys(t.database.db, day); // the other tests' keys (made today) go; this one stays
      assert.equal(await keyRows(), 1);
      // past 24 hours the key is a new request's, whatever it asks
      const expired = new Date(late.getTime() + IDEMPOTENCY_KEY_TTL_MS + 1);
      assert.equal((await claimIdempotencyKey(t.database.db, w.userB1.id, 'died', 'f2', 'holder-5', expired)).state, 'claimed');
      await completeIdempotencyKey(t.database.db, { userId: w.userB1.id, key: 'died', holder: 'holder-5' }, { ok: 2 });
      assert.equal(await deleteExpiredIdempotencyKeys(t.database.db, new Date(expired.getTime() + IDEMPOTENCY_KEY_TTL_MS - 1)), 0);
      assert.equal(await deleteExpiredIdempotencyKeys(t.database.db, new Date(expired.getTime() + IDEMPOTENCY_KEY_TTL_MS + 1)), 1);
      assert.equal(await keyRows(), 0);
      // the reservation sweep of every node deletes them
      const later = new Date(expired.getTime() + 1000);
      assert.equal((await claimIdempotencyKey(t.database.db, w.userB1.id, 'swept', 'f3', 'holder-6', later)).state, 'claimed');
      const errors: string[] = [];
      const log = { warn: () => undefined, error: (_o: object, m: string) => void errors.push(m) } as never;
      await new ReservationSweep(t.database.db, { now: () => new Date(later.getTime() + IDEMPOTENCY_KEY_TTL_MS - 1) }, log, () => undefined).run();
      assert.equal(await keyRows(), 1);
      await new ReservationSweep(t.database.db, { now: () => new Date(later.getTime() + IDEMPOTENCY_KEY_TTL_MS + 1) }, log, () => undefined).run();
      assert.equal(await keyRows(), 0);
      assert.deepEqual(errors, []);
    });
  });

  test('50 simultaneous requests against a balance covering about 20: never below zero, balance = start − ledger charges = start − recorded credits', async () => {
    // NOTE: PGlite runs one statement at a time, so these 50 requests interleave between statements but
    // never inside one: this test shows the pipeline's accounting under concurrency, it cannot prove the
    // row lock. The atomic guard itself is proven in the next test (a reservation larger than the balance
    // changes nothing; the guard is inside the single UPDATE, not a read-then-write).
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Race', ainame: 'Racer', maxCompletionTokens: 100 });
    const racer = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const token = (await login(t.app, racer.email)).accessToken;
    stub.setChatHandler(() => ({ content: 'short answer', usage: { prompt_tokens: 40, completion_tokens: 10 } }));
    // Reservation of one request: (ceil(input × 1.1) + 16) × 3/1000 + 100 × 5/1000 credits; find it from a first request.
    await t.database.db.execute(sql`update institutions set credits = 100 where id = ${inst.id}`);
    const probe = await ask(token, { inputs: ['race'] });
    assert.equal(probe.statusCode, 200, probe.body);
    const [reserve] = await rowsOf<{ delta: string }>(t.database.db, sql`select delta from credit_ledger where ref_id = ${probe.json().historyId} and kind = 'reserve'`);
    const perReservation = -Number(reserve!.delta);
    const start = Math.round(perReservation * 20.5 * 10_000) / 10_000;
    await t.database.db.execute(sql`update institutions set credits = ${start} where id = ${inst.id}`);
    const ledgerStart = await rowsOf<{ n: string }>(t.database.db, sql`select coalesce(max(created_at), now()) as n from credit_ledger where institution_id = ${inst.id}`);

    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => ask(token, { id: i, inputs: ['race'] })));
    const ok = results.filter((r) => r.statusCode === 200);
    const refused = results.filter((r) => r.statusCode === 402);
    // On a loaded machine the embedded database's synchronous work can hold the event loop past the
    // provider timeout: such a request is a 502 that charges nothing, which the balance checks below cover.
    const upstream = results.filter((r) => r.statusCode === 502);
    assert.equal(ok.length + refused.length + upstream.length, 50, results.map((r) => r.statusCode).join(','));
    assert.ok(ok.length >= 1 && refused.length >= 1, `${ok.length} answered, ${refused.length} refused`);
    const final = await balance('institutions', inst.id);
    assert.ok(final >= 0);
    const [charges] = await rowsOf<{ sum: string }>(
      t.database.db,
      sql`select coalesce(sum(delta), 0) as sum from credit_ledger where institution_id = ${inst.id} and created_at > ${ledgerStart[0]!.n}::timestamptz`,
    );
    const recorded = ok.reduce((s, r) => s + r.json().credits, 0);
    const [saved] = await rowsOf<{ sum: string }>(
      t.database.db,
      sql`select coalesce(sum(credits), 0) as sum from histories where institution_id = ${inst.id} and request_id is not null`,
    );
    assert.equal(Math.round((start + Number(charges!.sum)) * 10_000), Math.round(final * 10_000), 'balance = start + sum of ledger deltas');
    assert.equal(Math.round((start - recorded) * 10_000), Math.round(final * 10_000), 'balance = start − credits of the answers');
    assert.equal(Math.round(Number(saved!.sum) * 10_000), Math.round(recorded * 10_000), 'saved records carry the same credits');
    // The balance is re-derivable from the ledger alone: sum of every movement of this institution since the race.
    const [open] = await rowsOf<{ n: number }>(
      t.database.db,
      sql`select count(*)::int as n from credit_ledger l where l.kind = 'reserve' and l.institution_id = ${inst.id}
           and not exists (select 1 from credit_ledger r where r.ref_id = l.ref_id and r.kind = 'release')`,
    );
    assert.equal(open!.n, 0, 'every reservation was released');
  });

  test('a reservation left open by a request that died is released whole by the sweep, once; a settlement after that changes nothing', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Sweep', ainame: 'S' });
    await t.database.db.execute(sql`update institutions set credits = 10 where id = ${inst.id}`);
    const payer = { kind: 'institution' as const, institutionId: inst.id, accountId: w.accountA.id };
    const old = new Date(Date.now() - RESERVATION_STALE_MS - 60_000);
    // a request reserved, grew its reservation for a tool round, and its process died: nothing settled it
    assert.equal(await reserveCredits(t.database.db, payer, 20_000, w.userA1.id, 'died-1', old), 8);
    assert.equal(await extendReservation(t.database.db, payer, 10_000, w.userA1.id, 'died-1', old), true);
    // a recent one (a request still running) is left alone
    assert.equal(await reserveCredits(t.database.db, payer, 5_000, w.userA1.id, 'running-1', new Date()), 6.5);
    const logs: string[] = [];
    const log = { warn: (_o: object, m: string) => void logs.push(m), error: (o: object, m: string) => void logs.push(`${m} ${JSON.stringify(o)}`) } as never;
    const sweep = new ReservationSweep(t.database.db, { now: () => new Date() }, log, () => undefined);
    await sweep.run();
    assert.equal(await balanceOf(t.database.db, payer), 9.5, 'the dead request\'s 3 credits are back; the running one\'s 0.5 still held');
    assert.deepEqual((await ledgerOf('died-1')).map((l) => [l.kind, Number(l.delta)]).sort(), [['release', 3], ['reserve', -1], ['reserve', -2]]);
    assert.deepEqual(logs, ['released credit reservations of requests that ended without settling them']);
    // once: a second sweep, and the request's own settlement arriving late, change nothing
    await sweep.run();
    await assert.rejects(settleCredits(t.database.db, payer, 30_000, 10_000, w.userA1.id, 'died-1', new Date()), ReservationClosedError);
    assert.equal(await balanceOf(t.database.db, payer), 9.5);
    assert.equal((await ledgerOf('died-1')).length, 3);
    // the running one settles normally
    await settleCredits(t.database.db, payer, 5_000, 1_000, w.userA1.id, 'running-1', new Date());
    assert.equal(await balanceOf(t.database.db, payer), 9.9);
    const open = await rowsOf(t.database.db, sql`select ref_id from credit_reservations where ref_id in ('died-1', 'running-1')`);
    assert.equal(open.length, 0);
  });

  test("the node's sweep drops the cached user row of those it gives credits back to: GET /api/user/me shows the balance at once", async () => {
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    await t.database.db.execute(sql`update users set credits = 10 where id = ${user.id}`);
    const { accessToken } = await login(t.app, user.email);
    const payer = { kind: 'user' as const, userId: user.id, accountId: user.accountId };
    const me = async () => (await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) })).json().data.credits;
    // a request of this user reserved 2 credits long ago and its process died; the session's cached row says 8
    assert.equal(await reserveCredits(t.database.db, payer, 20_000, user.id, 'died-me-1', new Date(Date.now() - RESERVATION_STALE_MS - 60_000)), 8);
    assert.equal(await me(), 8);
    // the sweep the app runs (its own wiring) gives them back: /me says 10 at once, not after the cache's TTL
    await reservationSweep(t.app.ctx).run();
    assert.equal(await balanceOf(t.database.db, payer), 10);
    assert.equal(await me(), 10);
  });

  test('a settlement moves what the open reservation holds, not what its caller says; a reservation the sweep closed cannot grow again', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Held', ainame: 'H' });
    await t.database.db.execute(sql`update institutions set credits = 10 where id = ${inst.id}`);
    const payer = { kind: 'institution' as const, institutionId: inst.id, accountId: w.accountA.id };
    // a caller that believes it reserved 3 credits when the row holds 2: 2 come back, 0.5 is charged
    assert.equal(await reserveCredits(t.database.db, payer, 20_000, w.userA1.id, 'held-1', new Date()), 8);
    const settled = await settleCredits(t.database.db, payer, 30_000, 5_000, w.userA1.id, 'held-1', new Date());
    assert.equal(settled.balance, 9.5);
    assert.deepEqual((await ledgerOf('held-1')).map((l) => [l.kind, Number(l.delta)]).sort(), [['charge', -0.5], ['release', 2], ['reserve', -2]]);

    // a request that outlived the sweep: its reservation was released whole, so it cannot grow back
    const old = new Date(Date.now() - RESERVATION_STALE_MS - 60_000);
    assert.equal(await reserveCredits(t.database.db, payer, 20_000, w.userA1.id, 'slow-1', old), 7.5);
    const log = { warn: () => undefined, error: () => undefined } as never;
    await new ReservationSweep(t.database.db, { now: () => new Date() }, log, () => undefined).run();
    assert.equal(await balanceOf(t.database.db, payer), 9.5);
    assert.equal(await extendReservation(t.database.db, payer, 10_000, w.userA1.id, 'slow-1', new Date()), false);
    assert.equal(await balanceOf(t.database.db, payer), 9.5, 'the closed reservation took nothing more');
    await assert.rejects(settleCredits(t.database.db, payer, 30_000, 5_000, w.userA1.id, 'slow-1', new Date()), ReservationClosedError);
    assert.equal(await balanceOf(t.database.db, payer), 9.5, 'and gave nothing back twice');
    assert.deepEqual((await ledgerOf('slow-1')).map((l) => [l.kind, Number(l.delta)]).sort(), [['release', 2], ['reserve', -2]]);
    const [sum] = await rowsOf<{ s: string }>(t.database.db, sql`select coalesce(sum(delta), 0)::text as s from credit_ledger where institution_id = ${inst.id} and ref_id in ('held-1', 'slow-1')`);
    assert.equal(Number(sum!.s), -0.5, 'the ledger of both requests is the one charge');
  });

  test('an answer whose reservation the sweep released while it ran gets 409 and is not charged; the balance is as before it', async () => {
    const before = await balance('institutions', w.a1.id);
    // the model answers only after every open reservation was released as stale (this request's among them)
    stub.setChatHandler(async () => {
      await releaseStaleReservations(t.database.db, new Date(Date.now() + 3_600_000), new Date());
      return { content: 'late answer', usage: { prompt_tokens: 50, completion_tokens: 100 } };
    });
    const res = await ask(tok.userA1!, { id: 1700000000999, inputs: ['A slow question?'], outputs: [] });
    stub.setChatHandler(null);
    assert.equal(res.statusCode, 409, res.body);
    assert.equal(res.json().error.code, 'CONFLICT');
    assert.equal(await balance('institutions', w.a1.id), before);
  });

  test('a free request (nothing reserved) settles to the balances as they are', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Free', ainame: 'F' });
    await t.database.db.execute(sql`update institutions set credits = 7 where id = ${inst.id}`);
    await t.database.db.execute(sql`update users set credits_used = 1.25 where id = ${w.userA2.id}`);
    const payer = { kind: 'institution' as const, institutionId: inst.id, accountId: w.accountA.id };
    assert.equal(await reserveCredits(t.database.db, payer, 0, w.userA2.id, 'free-1', new Date()), 7);
    assert.deepEqual(await settleCredits(t.database.db, payer, 0, 0, w.userA2.id, 'free-1', new Date()), { balance: 7, userCreditsUsed: 1.25, chargedUnits: 0 });
    assert.equal((await ledgerOf('free-1')).length, 0);
  });

  test('the reservation is one statement (guarded UPDATE and its ledger row in one CTE): an amount above the balance changes nothing, the exact balance empties it', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Guard', ainame: 'G' });
    await t.database.db.execute(sql`update institutions set credits = 1.5 where id = ${inst.id}`);
    const payer = { kind: 'institution' as const, institutionId: inst.id, accountId: w.accountA.id };
    const now = new Date();
    assert.equal(await reserveCredits(t.database.db, payer, 15_001, w.userA1.id, 'guard-1', now), null);
    assert.equal(await balanceOf(t.database.db, payer), 1.5);
    assert.equal((await ledgerOf('guard-1')).length, 0, 'no ledger row for a refused reservation');
    assert.equal(await reserveCredits(t.database.db, payer, 15_000, w.userA1.id, 'guard-2', now), 0);
    assert.equal(await reserveCredits(t.database.db, payer, 1, w.userA1.id, 'guard-3', now), null);
    assert.deepEqual((await ledgerOf('guard-2')).map((l) => [l.kind, Number(l.delta)]), [['reserve', -1.5]]);
  });
});
