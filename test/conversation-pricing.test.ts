/**
 * The cost of an answer is priced by the model the provider reports, and the actual cost is charged even beyond the
 * reservation (credits.repository.ts settleCredits). A requested model priced 0 reserved nothing and opened no
 * reservation, so its settlement took the "free request" path: an answer the provider reported as a priced model
 * was never charged (the same answer cost 20 credits when the requested model cost 0.001/1k, and 0 when it cost 0).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';

describe('Q&A pricing by the reported model', () => {
  let t: TestApp;
  let stub: OpenAiStub;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const tok: Record<string, string> = {};

  before(async () => {
    stub = await startOpenAiStub();
    t = await startTestApp({
      env: {
        LOGIN_RATE_LIMIT_PER_EMAIL: '1000',
        LOGIN_RATE_LIMIT_PER_IP: '10000',
        QANDA_RATE_LIMIT_PER_MINUTE: '1000',
        LLM_PROVIDER: 'openai-compatible',
        LLM_BASE_URL: stub.baseUrl,
        LLM_MODEL: 'stub-default',
        LLM_MAX_RETRIES: '0',
        LLM_TIMEOUT_MS: '5000',
        // models not listed are free; the model the provider answers with is priced 10 / 10 credits per 1k tokens
        MODEL_PRICES: JSON.stringify({ '*': { input: 0, output: 0 }, 'stub-pricey': { input: 10, output: 10 }, 'stub-cheap': { input: 0.001, output: 0.001 } }),
      },
    });
    w = await makeWorld(t.database);
    tok.root = (await login(t.app, w.superadmin.email)).accessToken;
    tok.userA1 = (await login(t.app, w.userA1.email)).accessToken;
    const topUp = await t.app.inject({ method: 'POST', url: `/api/admin/institution/${w.a1.id}/credits`, headers: bearer(tok.root), payload: { amount: 100 } });
    assert.equal(topUp.statusCode, 200, topUp.body);
  });
  after(async () => {
    await t.close();
    await stub.close();
  });

  const ask = () => t.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': tok.userA1! }, payload: { inputs: ['hello'] } });
  const chargedOf = async (refId: string) =>
    -Number((await rowsOf<{ s: string }>(t.database.db, sql`select coalesce(sum(delta), 0)::text as s from credit_ledger where ref_id = ${refId}`))[0]!.s);

  test('an answer the provider reports as a priced model is charged its price whatever the requested model costs (also when that is 0)', async () => {
    stub.setChatHandler(() => ({ content: 'an answer', model: 'stub-pricey', usage: { prompt_tokens: 1000, completion_tokens: 1000 } }));
    // 1000 × 10/1000 + 1000 × 10/1000 = 20 credits at the reported model's price

    // requested model priced 0.001/1k: a tiny reservation, and the actual cost (20) is charged beyond it
    await t.database.db.execute(sql`update institutions set conversation_model = 'stub-cheap' where id = ${w.a1.id}`);
    const cheap = await ask();
    assert.equal(cheap.statusCode, 200, cheap.body);
    assert.equal(cheap.json().model, 'stub-pricey');
    assert.equal(cheap.json().credits, 20);
    assert.equal(await chargedOf(cheap.json().historyId), 20);

    // requested model free (the "*" price): the very same answer
    await t.database.db.execute(sql`update institutions set conversation_model = null where id = ${w.a1.id}`);
    const before = Number((await rowsOf<{ c: string }>(t.database.db, sql`select credits::text as c from institutions where id = ${w.a1.id}`))[0]!.c);
    const free = await ask();
    assert.equal(free.statusCode, 200, free.body);
    assert.equal(free.json().model, 'stub-pricey');
    assert.equal(free.json().usage, 2000);
    const after = Number((await rowsOf<{ c: string }>(t.database.db, sql`select credits::text as c from institutions where id = ${w.a1.id}`))[0]!.c);
    assert.equal(free.json().credits, 20, 'the answer of a priced model is charged (contract §6: after the call the actual cost is charged)');
    assert.equal(await chargedOf(free.json().historyId), 20, 'a charge ledger row of the actual cost');
    assert.equal(Math.round((before - after) * 10_000), 200_000, 'the pool paid the actual cost');

    // a free answer of a free model: nothing moves, no ledger row, no reservation left open
    stub.setChatHandler(() => ({ content: 'an answer', model: 'stub-default', usage: { prompt_tokens: 1000, completion_tokens: 1000 } }));
    const gratis = await ask();
    assert.equal(gratis.statusCode, 200, gratis.body);
    assert.equal(gratis.json().credits, 0);
    assert.equal((await rowsOf(t.database.db, sql`select 1 from credit_ledger where ref_id = ${gratis.json().historyId}`)).length, 0);
    assert.equal((await rowsOf(t.database.db, sql`select 1 from credit_reservations`)).length, 0);
    const unchanged = Number((await rowsOf<{ c: string }>(t.database.db, sql`select credits::text as c from institutions where id = ${w.a1.id}`))[0]!.c);
    assert.equal(unchanged, after);
  });
});
