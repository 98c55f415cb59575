/**
 * What the model provider sends back (the answer, streamed deltas, the model name, tool calls) is text the
 * service stores: a NUL or a lone surrogate in it is dropped or made U+FFFD (Postgres refuses them), a
 * content of text parts is its text, and any other content is an upstream failure. A database failure
 * while the answer is saved is ours: a 500 that charges nothing, never the client's 400.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import type { Socket as ClientSocket } from 'socket.io-client';
import { rowsOf } from '../src/db/client.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { ClientSockets, listenLocally, streamOn, stubModelEnv } from './support/realtime.js';

describe('Q&A: the text a model provider sends is stored as the database can hold it', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let stub: OpenAiStub;
  let base: string;
  let token: string;
  const sockets = new ClientSockets();

  before(async () => {
    stub = await startOpenAiStub();
    t = await startTestApp({ env: stubModelEnv(stub, { LLM_TIMEOUT_MS: '3000' }) });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
    await t.database.db.execute(sql`update institutions set credits = 1000, max_completion_tokens = 200 where id = ${w.a1.id}`);
    token = (await login(t.app, w.userA1.email)).accessToken;
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
    await stub.close();
  });

  const ask = (body: unknown, headers: Record<string, string> = {}) =>
    t.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token, ...headers }, payload: body as object });
  const balance = async () => Number((await rowsOf<{ credits: string }>(t.database.db, sql`select credits from institutions where id = ${w.a1.id}`))[0]!.credits);
  const recordsOf = (input: string) => rowsOf<Record<string, any>>(t.database.db, sql`select * from histories where input = ${input} order by created_at`);
  const ledgerOf = (refId: string) => rowsOf<{ kind: string; delta: string }>(t.database.db, sql`select kind, delta from credit_ledger where ref_id = ${refId} order by kind`);
  /** 10 input and 10 output tokens at the default price (1 and 2 credits per 1,000): 0.03. */
  const USAGE = { prompt_tokens: 10, completion_tokens: 10 };
  const PRICE = 0.03;
  const spent = async (before: number) => Math.round((before - (await balance())) * 10_000) / 10_000;

  const streamOf = (socket: ClientSocket) => streamOn(socket).done;

  async function clockAssistant(name: string): Promise<string> {
    const created = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(token), payload: { name, assistantToolMode: 'all' } });
    assert.equal(created.statusCode, 201, created.body);
    return created.json().data._id;
  }

  test('an answer holding a NUL character: 200, saved and paid without it (it was a 400 VALIDATION_FAILED that still charged)', async () => {
    stub.setChatHandler(() => ({ content: 'hello\u0000world', usage: USAGE }));
    const before = await balance();
    const res = await ask({ inputs: ['nul answer'], requestArgs: { ragIgnore: true } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().outputs, ['helloworld']);
    assert.equal(res.json().credits, PRICE);
    assert.equal(await spent(before), PRICE);
    const [rec, ...more] = await recordsOf('nul answer');
    assert.equal(more.length, 0);
    assert.equal(rec!.success, true);
    assert.deepEqual(rec!.outputs, ['helloworld']);
  });

  test('a model name holding a NUL character: 200, the name recorded without it', async () => {
    stub.setChatHandler(() => ({ content: 'fine', model: 'stub\u0000chat', usage: USAGE }));
    const before = await balance();
    const res = await ask({ inputs: ['nul model'], requestArgs: { ragIgnore: true } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().model, 'stubchat');
    assert.equal(await spent(before), PRICE);
    const [rec] = await recordsOf('nul model');
    assert.equal(rec!.conversation_model, 'stubchat');
  });

  test('an answer holding a lone surrogate, asked with an Idempotency-Key: 200 with U+FFFD in its place, and the replay is the same (it was a 500 that still charged)', async () => {
    stub.setChatHandler(() => ({ content: 'broken emoji \ud83d here', usage: USAGE }));
    const before = await balance();
    const body = { inputs: ['surrogate answer'], requestArgs: { ragIgnore: true } };
    const res = await ask(body, { 'idempotency-key': 'provider-text-surrogate-1' });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().outputs, ['broken emoji \ufffd here']);
    assert.equal(await spent(before), PRICE);
    const replay = await ask(body, { 'idempotency-key': 'provider-text-surrogate-1' });
    assert.equal(replay.statusCode, 200, replay.body);
    assert.deepEqual(replay.json().outputs, ['broken emoji \ufffd here']);
    assert.equal(await spent(before), PRICE, 'paid once');
    assert.deepEqual((await recordsOf('surrogate answer')).map((r) => r.outputs), [['broken emoji \ufffd here']]);
  });

  test('streamed deltas: a NUL is dropped, a lone surrogate is U+FFFD, a surrogate pair cut between two deltas stays one character', async () => {
    stub.setChatHandler(() => ({ content: '', deltas: ['he\u0000llo ', 'smile \ud83d', '\ude00 and ', 'broken \udc00 end'], usage: USAGE }));
    const socket = await sockets.open(base, token);
    const stream = streamOf(socket);
    const res = await ask({ id: 5, inputs: ['streamed text'], requestArgs: { ragIgnore: true, socketId: socket.id } });
    assert.equal(res.statusCode, 200, res.body);
    const expected = 'hello smile \u{1f600} and broken \ufffd end';
    assert.deepEqual(res.json().outputs, [expected]);
    assert.equal(res.json().streamingFailed, false);
    const events = await stream;
    assert.equal(events.map((e) => e.chunk).join(''), expected);
    assert.ok(events.every((e) => !/\p{Cs}|\u0000/u.test(e.chunk)), 'no chunk holds half a pair or a NUL');
    assert.deepEqual((await recordsOf('streamed text')).map((r) => r.outputs), [[expected]]);
  });

  for (const [label, args, timezone] of [
    ['a NUL', '{"timezone":"\\u0000"}', ''],
    ['a lone surrogate', '{"timezone":"\\ud800"}', '\ufffd'],
  ] as const) {
    test(`tool-call arguments holding ${label} (as a JSON escape): 200, the call recorded with its argument made storable`, async () => {
      const assistantId = await clockAssistant(`Clock ${label}`);
      stub.setChatHandler(({ body }) => {
        if (body.messages.at(-1).role === 'tool') return { content: 'It is noon.', usage: USAGE };
        return { content: '', toolCalls: [{ name: 'current_datetime', arguments: args }], usage: USAGE };
      });
      const input = `what time is it (${label})?`;
      const before = await balance();
      const res = await ask({ inputs: [input], requestArgs: { assistantId, ragIgnore: true } });
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json().outputs, ['It is noon.']);
      assert.equal(await spent(before), 2 * PRICE);
      const [rec] = await recordsOf(input);
      assert.equal(rec!.tool_calls.length, 1);
      assert.equal(rec!.tool_calls[0].tool, 'current_datetime');
      assert.deepEqual(rec!.tool_calls[0].arguments, { timezone });
    });
  }

  test('a tool-call name holding a NUL: 200, the call recorded under the name without it', async () => {
    const assistantId = await clockAssistant('Clock with a broken name');
    stub.setChatHandler(({ body }) => {
      if (body.messages.at(-1).role === 'tool') return { content: `Tool said: ${body.messages.at(-1).content}`, usage: USAGE };
      return { content: '', toolCalls: [{ name: 'clock\u0000', arguments: '{}' }], usage: USAGE };
    });
    const res = await ask({ inputs: ['nul tool name'], requestArgs: { assistantId, ragIgnore: true } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().outputs, ['Tool said: Error: unknown tool clock']);
    const [rec] = await recordsOf('nul tool name');
    assert.deepEqual(rec!.tool_calls, [{ tool: 'clock', arguments: {}, response: 'Error: unknown tool clock' }]);
  });

  test('a model message asking for 10,000 tool calls: the first 16 run, are sent back and recorded, and the last response tells the model the rest did not run (all 10,000 ran, were sent back and recorded); 16 calls run without the note', async () => {
    const assistantId = await clockAssistant('Clock asked too often');
    const asking = (n: number) => ({ body }: { body: any }) =>
      body.messages.at(-1).role === 'tool'
        ? { content: 'Done asking.', usage: USAGE }
        : { content: '', toolCalls: Array.from({ length: n }, () => ({ name: 'current_datetime', arguments: '{}' })), usage: USAGE };
    const roundOf = async (n: number, question: string) => {
      stub.setChatHandler(asking(n));
      const calls = stub.requestsTo('/v1/chat/completions').length;
      const res = await ask({ inputs: [question], requestArgs: { assistantId, ragIgnore: true } });
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json().outputs, ['Done asking.']);
      assert.equal(stub.requestsTo('/v1/chat/completions').length, calls + 2, 'one tool round, then the answer');
      const next = stub.requestsTo('/v1/chat/completions').at(-1)!.body;
      const turn = next.messages.filter((m: any) => m.role === 'assistant').at(-1);
      const answers = next.messages.filter((m: any) => m.role === 'tool');
      const [rec, ...more] = await recordsOf(question);
      assert.equal(more.length, 0);
      return { turn, answers, rec: rec! };
    };

    const cut = await roundOf(10_000, 'the time, ten thousand times');
    // the stub numbers a message's calls call_<n>_<i>: the turn sent back holds the model's first 16, each answered once
    assert.deepEqual(cut.turn.tool_calls.map((c: any) => c.id.split('_').at(-1)), Array.from({ length: 16 }, (_, i) => String(i)));
    assert.deepEqual(cut.answers.map((m: any) => m.tool_call_id), cut.turn.tool_calls.map((c: any) => c.id));
    assert.deepEqual(cut.answers.slice(0, 15).filter((m: any) => m.content.includes('too many tool calls')), []);
    assert.match(cut.answers[15].content, /ISO .*\n\nError: too many tool calls: you asked for 10000 in one turn and only the first 16 were run \(the others were not\); ask for at most 16 at a time\.$/);
    assert.equal(cut.rec.tool_calls.length, 16);
    assert.equal(cut.rec.tool_calls[15].response, cut.answers[15].content);

    const whole = await roundOf(16, 'the time, sixteen times');
    assert.equal(whole.turn.tool_calls.length, 16);
    assert.equal(whole.answers.length, 16);
    assert.deepEqual(whole.answers.filter((m: any) => m.content.includes('too many tool calls')), []);
    assert.equal(whole.rec.tool_calls.length, 16);
  });

  test('a content of text parts is the text of its parts, in a completion and in streamed deltas (it was "[object Object]")', async () => {
    stub.setChatHandler(() => ({ content: [{ type: 'text', text: 'Paris is ' }, { type: 'image_url', image_url: { url: 'x' } }, { type: 'text', text: 'the capital.' }], usage: USAGE }));
    const res = await ask({ inputs: ['capital of France?'], requestArgs: { ragIgnore: true } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().outputs, ['Paris is the capital.']);

    stub.setChatHandler(() => ({ content: '', deltas: [[{ type: 'text', text: 'Rome is ' }], [{ type: 'text', text: 'the capital' }, { type: 'text', text: ' of Italy.' }]], usage: USAGE }));
    const socket = await sockets.open(base, token);
    const stream = streamOf(socket);
    const streamed = await ask({ id: 6, inputs: ['capital of Italy?'], requestArgs: { ragIgnore: true, socketId: socket.id } });
    assert.equal(streamed.statusCode, 200, streamed.body);
    assert.deepEqual(streamed.json().outputs, ['Rome is the capital of Italy.']);
    assert.equal((await stream).map((e) => e.chunk).join(''), 'Rome is the capital of Italy.');
  });

  test('a content that is neither text nor text parts is an upstream failure: 502, nothing charged, the failed turn recorded', async () => {
    for (const [input, content] of [
      ['content an object', { text: 'not like this' }],
      ['content a number', 42],
    ] as const) {
      stub.setChatHandler(() => ({ content, usage: USAGE }));
      const before = await balance();
      const res = await ask({ inputs: [input], requestArgs: { ragIgnore: true } });
      assert.equal(res.statusCode, 502, res.body);
      assert.equal(res.json().error.code, 'UPSTREAM_FAILED');
      assert.equal(await balance(), before);
      const records = await recordsOf(input);
      assert.deepEqual(records.map((r) => [r.success, r.error_code]), [[false, 'UPSTREAM_FAILED']]);
    }
  });

  describe('a database failure while the answer is saved', () => {
    // The database refuses the successful record of one question (or every record of it) with the SQLSTATE of
    // a NUL character, which the error handler would take for the client's bad input.
    before(async () => {
      await t.database.db.execute(sql.raw(`
        create function refuse_test_history() returns trigger language plpgsql as $$
        begin
          if new.input = 'refused when saved' and new.success or new.input = 'refused always' then
            raise exception 'test: this record cannot be stored' using errcode = '22P05';
          end if;
          return new;
        end $$`));
      await t.database.db.execute(sql.raw('create trigger refuse_test_history before insert on histories for each row execute function refuse_test_history()'));
    });
    after(async () => {
      await t.database.db.execute(sql.raw('drop trigger refuse_test_history on histories'));
      await t.database.db.execute(sql.raw('drop function refuse_test_history()'));
    });

    test('is a 500, never the client\'s 400; nothing is charged and the failed turn is recorded', async () => {
      stub.setChatHandler(() => ({ content: 'an answer that will not be saved', usage: USAGE }));
      const socket = await sockets.open(base, token);
      const stream = streamOf(socket);
      const before = await balance();
      const res = await ask({ id: 8, inputs: ['refused when saved'], requestArgs: { ragIgnore: true, socketId: socket.id } });
      assert.equal(res.statusCode, 500, res.body);
      assert.deepEqual(res.json(), { success: false, message: 'The answer could not be produced; it was not charged', error: { code: 'INTERNAL', details: [] } });
      const events = await stream;
      assert.equal(events.slice(0, -1).map((e) => e.chunk).join(''), 'an answer that will not be saved');
      assert.deepEqual(events.at(-1), { id: 8, chunk: '', index: events.length - 1, done: true, error: 'The answer could not be produced; it was not charged', usage: 20, credits: 0 });
      assert.equal(await balance(), before);
      const [rec, ...more] = await recordsOf('refused when saved');
      assert.equal(more.length, 0);
      assert.equal(rec!.success, false);
      assert.equal(rec!.error_code, 'INTERNAL');
      assert.equal(Number(rec!.credits), 0);
      assert.equal(rec!.usage, 20);
      assert.deepEqual((await ledgerOf(rec!.id)).map((l) => l.kind), ['release', 'reserve']);
      assert.equal(Math.round((await ledgerOf(rec!.id)).reduce((sum, l) => sum + Number(l.delta), 0) * 10_000), 0);
    });

    test('when not even the failed turn can be recorded: a 500, and the reservation is still released whole', async () => {
      stub.setChatHandler(() => ({ content: 'nowhere to go', usage: USAGE }));
      const before = await balance();
      const res = await ask({ inputs: ['refused always'], requestArgs: { ragIgnore: true } });
      assert.equal(res.statusCode, 500, res.body);
      assert.equal(res.json().error.code, 'INTERNAL');
      assert.equal(await balance(), before);
      assert.equal((await recordsOf('refused always')).length, 0);
      assert.equal((await rowsOf(t.database.db, sql`select 1 from credit_reservations`)).length, 0, 'no reservation left open');
    });
  });
});
