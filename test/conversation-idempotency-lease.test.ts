import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { moveInstitutionCredits } from '../src/modules/tenancy/credits.repository.js';
import { ClaimLostError, claimIdempotencyKey, completeIdempotencyKey, fingerprintOf, IDEMPOTENCY_LEASE_MS } from '../src/platform/idempotency.js';
import { ManualClock } from '../src/shared/clock.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { stubModelEnv } from './support/realtime.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

/**
 * The lease of a running request's Idempotency-Key (platform/idempotency.ts): the node renews it while the
 * request runs; a retry takes over a claim whose holder went silent for IDEMPOTENCY_LEASE_MS. Time is the
 * app's clock, moved by the test; the node's renewals are driven by the test (`renew`) or stopped (`stop`:
 * its node can no longer reach the database, as if it had died), so no assertion depends on real time.
 *
 * NOTE: PGlite runs one statement at a time, so the takeover and the first holder's settlement here follow
 * one another; these tests show what each finds, they cannot prove the row locks that order them on
 * PostgreSQL (the claim is locked first by both: holdIdempotencyKey and the takeover's select for update).
 */
describe('Idempotency-Key leases', () => {
  let t: TestApp;
  let w: World;
  let stub: OpenAiStub;
  let token: string;
  let rootToken: string;
  const clock = new ManualClock(new Date());
  const calls = () => stub.requestsTo('/v1/chat/completions').length;

  before(async () => {
    stub = await startOpenAiStub();
    t = await startTestApp({ clock, env: stubModelEnv(stub, { LLM_TIMEOUT_MS: '600000', MODEL_PRICES: JSON.stringify({ '*': { input: 1, output: 2 } }) }) });
    w = await makeWorld(t.database);
    await t.database.db.execute(sql`update institutions set credits = 1000, max_completion_tokens = 200 where id = ${w.a1.id}`);
    token = (await login(t.app, w.userA1.email)).accessToken;
    rootToken = (await login(t.app, w.superadmin.email)).accessToken;
  });
  after(async () => {
    await t.close();
    await stub.close();
  });

  const askWithKey = (key: string, question: string) =>
    t.app.inject({ method: 'POST', url: '/api/ai/personal/qanda', headers: { 'x-access-token': token, 'idempotency-key': key }, payload: { inputs: [question], requestArgs: { ragIgnore: true } } });
  const poolBalance = async () => Number((await rowsOf<{ credits: string }>(t.database.db, sql`select credits from institutions where id = ${w.a1.id}`))[0]!.credits);
  const ledgerOf = async (refId: string) =>
    (await rowsOf<{ kind: string; delta: string }>(t.database.db, sql`select kind, delta from credit_ledger where ref_id = ${refId}`)).map((l) => [l.kind, Number(l.delta)] as const).sort();
  /** The one credit reservation the user's requests hold open (the request at the model). */
  const openReservation = async () => {
    const rows = await rowsOf<{ ref_id: string }>(t.database.db, sql`select ref_id from credit_reservations where actor_user_id = ${w.userA1.id}`);
    assert.equal(rows.length, 1);
    return rows[0]!.ref_id;
  };
  const recordsOf = async (question: string) =>
    (await rowsOf<{ id: string; success: boolean }>(t.database.db, sql`select id, success from histories where user_id = ${w.userA1.id} and input = ${question} order by created_at`)).map((r) => [r.id, r.success]);
  /** The model's first answer waits for `open()` (`atModel` resolves once a request is there); the others come at once. */
  function gatedModel(content: string) {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let reached!: () => void;
    const atModel = new Promise<void>((resolve) => (reached = resolve));
    let first = true;
    stub.setChatHandler(async () => {
      if (first) {
        first = false;
        reached();
        await gate;
      }
      return { content, usage: { prompt_tokens: 40, completion_tokens: 10 } };
    });
    return { open, atModel };
  }

  test('a request whose node went silent: once its lease lapsed the retry is answered afresh, the silent one\'s reservation released in the takeover; it then cannot complete the key nor pay', async (tc) => {
    const question = 'who holds this key?';
    const model = gatedModel('The retry answers.');
    const before = await poolBalance();
    const modelCalls = calls();
    // the first request reaches the model and its node stops renewing (as if it died, or lost the database)
    await t.app.ctx.idempotency.stop();
    tc.after(() => t.app.ctx.idempotency.start());
    const silent = askWithKey('lease-1', question);
    await model.atModel;
    const deadRef = await openReservation();
    assert.deepEqual((await ledgerOf(deadRef)).map(([kind]) => kind), ['reserve'], 'the silent request holds a reservation');
    const held = Math.round((before - (await poolBalance())) * 10_000) / 10_000;
    assert.ok(held > 0);

    // within its lease the key is still its own
    clock.advance(IDEMPOTENCY_LEASE_MS - 1);
    const early = await askWithKey('lease-1', question);
    assert.equal(early.statusCode, 409, early.body);
    assert.equal(early.headers['retry-after'], '1');

    // past it, the retry takes the key over: a fresh answer, and the silent request's reservation is released whole
    clock.advance(2);
    const retry = await askWithKey('lease-1', question);
    assert.equal(retry.statusCode, 200, retry.body);
    assert.equal(retry.headers['idempotent-replayed'], undefined);
    assert.deepEqual(retry.json().outputs, ['The retry answers.']);
    assert.equal(calls(), modelCalls + 2);
    assert.deepEqual(await ledgerOf(deadRef), [
      ['release', held],
      ['reserve', -held],
    ]);
    const charge = retry.json().credits;
    assert.ok(charge > 0);
    assert.deepEqual((await ledgerOf(retry.json().historyId)).map(([kind]) => kind), ['charge', 'release', 'reserve']);
    assert.equal(Math.round((before - (await poolBalance())) * 10_000), Math.round(charge * 10_000), 'one charge in all: the retry\'s');

    // the silent request was alive after all: its answer finds its claim gone, and pays and saves nothing
    model.open();
    const late = await silent;
    assert.equal(late.statusCode, 409, late.body);
    assert.equal(late.json().error.code, 'CONFLICT');
    assert.match(late.json().message, /took this request over/);
    assert.deepEqual((await ledgerOf(deadRef)).map(([kind]) => kind), ['release', 'reserve'], 'nothing more moved for it');
    assert.equal(Math.round((before - (await poolBalance())) * 10_000), Math.round(charge * 10_000));
    assert.deepEqual(await recordsOf(question), [[retry.json().historyId, true]]);
    // the key keeps the retry's response
    const replay = await askWithKey('lease-1', question);
    assert.equal(replay.statusCode, 200, replay.body);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(replay.json().historyId, retry.json().historyId);
    assert.equal(calls(), modelCalls + 2);
  });

  test('a request whose node renews its lease keeps its key however long it runs: every retry meanwhile is a 409, then the replay; one charge', async () => {
    const question = 'a long answer, please';
    const model = gatedModel('Worth the wait.');
    const before = await poolBalance();
    const modelCalls = calls();
    const running = askWithKey('lease-2', question);
    await model.atModel;
    // four leases long, renewed within each
    for (let i = 0; i < 4; i++) {
      await t.app.ctx.idempotency.renew();
      clock.advance(IDEMPOTENCY_LEASE_MS - 1);
      const during = await askWithKey('lease-2', question);
      assert.equal(during.statusCode, 409, `after ${i + 1} leases: ${during.body}`);
      assert.equal(during.json().error.code, 'CONFLICT');
    }
    model.open();
    const first = await running;
    assert.equal(first.statusCode, 200, first.body);
    // complete, the key is no lease any more: long after, still the replay
    clock.advance(3 * IDEMPOTENCY_LEASE_MS);
    const replay = await askWithKey('lease-2', question);
    assert.equal(replay.statusCode, 200, replay.body);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(replay.json().historyId, first.json().historyId);
    assert.equal(calls(), modelCalls + 1);
    assert.equal(Math.round((before - (await poolBalance())) * 10_000), Math.round(first.json().credits * 10_000));
    assert.deepEqual(await recordsOf(question), [[first.json().historyId, true]]);
  });

  test('a top-up whose node died holding its key: the retry after the lease moves the credits, once', async () => {
    const body = { amount: 30 };
    const topup = () =>
      t.app.inject({ method: 'POST', url: `/api/admin/institution/${w.a2.id}/credits`, headers: { 'x-access-token': rootToken, 'idempotency-key': 'topup-died' }, payload: body });
    const balanceA2 = async () => Number((await rowsOf<{ credits: string }>(t.database.db, sql`select credits from institutions where id = ${w.a2.id}`))[0]!.credits);
    const start = await balanceA2();
    // the claim of a top-up whose process died before its transaction committed (nothing moved)
    const fingerprint = fingerprintOf({ route: 'institution-credits', id: w.a2.id, body });
    assert.equal((await claimIdempotencyKey(t.database.db, w.superadmin.id, 'topup-died', fingerprint, 'dead-topup', clock.now())).state, 'claimed');
    clock.advance(IDEMPOTENCY_LEASE_MS - 1);
    assert.equal((await topup()).statusCode, 409);
    clock.advance(2);
    const retry = await topup();
    assert.equal(retry.statusCode, 200, retry.body);
    assert.equal(retry.json().data.credits, start + 30);
    const again = await topup();
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(await balanceA2(), start + 30);
  });

  test('a credit movement whose claim was taken over rolls back: its transaction cannot complete the key', async () => {
    const balanceB1 = async () => Number((await rowsOf<{ credits: string }>(t.database.db, sql`select credits from institutions where id = ${w.b1.id}`))[0]!.credits);
    const start = await balanceB1();
    const first = { userId: w.superadmin.id, key: 'topup-lost', holder: 'slow-topup' };
    assert.equal((await claimIdempotencyKey(t.database.db, first.userId, first.key, 'f', first.holder, clock.now())).state, 'claimed');
    clock.advance(IDEMPOTENCY_LEASE_MS + 1);
    assert.equal((await claimIdempotencyKey(t.database.db, first.userId, first.key, 'f', 'retry-topup', clock.now())).state, 'claimed');
    // what the top-up's transaction does (tenancy.service addInstitutionCredits): the movement, then the key's response
    await assert.rejects(
      t.database.db.transaction(async (tx) => {
        const credits = await moveInstitutionCredits(tx, w.b1.id, 30, { kind: 'topup', actorUserId: first.userId });
        await completeIdempotencyKey(tx, first, { _id: w.b1.id, credits });
      }),
      ClaimLostError,
    );
    assert.equal(await balanceB1(), start);
  });
});
