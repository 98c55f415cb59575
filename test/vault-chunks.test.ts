import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { uploads } from '../src/db/schema.js';
import { createChatModel, SANITIZE_SYSTEM_PROMPT, type ChatModel } from '../src/providers/llm/index.js';
import { countTokens } from '../src/modules/vault/ingest/chunker.js';
import { ingestGiveUp, ingestUpload, type IngestDeps } from '../src/modules/vault/ingest/pipeline.js';
import type { Job } from '../src/platform/jobs.js';
import { writeEmbedderState } from '../src/modules/search/search.repository.js';
import type { Embedder } from '../src/providers/embeddings/types.js';
import { newId } from '../src/shared/ids.js';
import { startOpenAiStub, type OpenAiStub } from './support/openai-stub.js';
import { bearer, login, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;
type Scope = 'personal' | 'instance' | 'account';
type Owner = { id: string; accountId: string };

const parseVector = (text: string): number[] => text.replace(/^\[|\]$/g, '').split(',').map(Number);

describe('vault embedding chunks and sanitize', () => {
  let t: TestApp;
  let w: World;
  const tok: Record<string, string> = {};
  let userA1b: Owner & { email: string };

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '1000' } });
    w = await makeWorld(t.database);
    userA1b = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    for (const [name, user] of Object.entries({ userA1: w.userA1, userA1b, adminA1: w.adminA1, userA2: w.userA2, userB1: w.userB1 })) {
      tok[name] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(() => t.close());

  // ───── factories: rows straight into uploads and chunks (no ingestion) ─────

  async function makeUpload(fields: { owner: Owner; scope: Scope; institutionId?: string | null; status?: string; isPrivate?: boolean; originalname?: string }) {
    const id = newId();
    await t.database.db.insert(uploads).values({
      id,
      originalname: fields.originalname ?? `doc-${id.slice(-6)}.txt`,
      filesize: 100,
      mimetype: 'text/plain',
      scope: fields.scope,
      ownerUserId: fields.owner.id,
      institutionId: fields.scope === 'personal' ? null : (fields.institutionId ?? null),
      accountId: fields.owner.accountId,
      isPrivate: fields.isPrivate ?? false,
      status: fields.status ?? 'active',
      storageKey: `test/${id}`,
      sha256: '0'.repeat(64),
    });
    return id;
  }

  /** A chunk with its real vector (the app's embedder) and full-text index; the upload's text_tokens follow. */
  async function makeChunk(uploadId: string, index: number, text: string) {
    const id = newId();
    const [vector] = await t.app.ctx.providers.embedder.embed([text]);
    const tokens = countTokens(text);
    await t.database.db.execute(
      sql`insert into chunks (id, upload_id, chunk_index, text, tokens, tsv)
          values (${id}, ${uploadId}, ${index}, ${text}, ${tokens}, to_tsvector('english', ${text}))`,
    );
    await t.database.db.execute(sql`insert into chunk_vectors (chunk_id, upload_id, embedding) values (${id}, ${uploadId}, ${`[${vector!.join(',')}]`}::vector)`);
    await t.database.db.execute(sql`update uploads set text_tokens = text_tokens + ${tokens}, chunk_count = chunk_count + 1 where id = ${uploadId}`);
    return id;
  }

  const call = (app: TestApp, method: 'GET' | 'POST' | 'PUT', url: string, who: string, payload?: object) =>
    app.app.inject({ method, url, headers: bearer(tok[who]!), ...(payload ? { payload } : {}) });

  async function uploadRow(id: string) {
    const [row] = await rowsOf<{ tokens_used: string | number; text_tokens: number }>(t.database.db, sql`select tokens_used, text_tokens from uploads where id = ${id}`);
    return { tokensUsed: Number(row!.tokens_used), textTokens: Number(row!.text_tokens) };
  }

  async function chunkRow(id: string) {
    const [row] = await rowsOf<{ text: string; tokens: number; embedding: string }>(t.database.db, sql`select c.text, c.tokens, v.embedding::text as embedding from chunks c join chunk_vectors v on v.chunk_id = c.id where c.id = ${id}`);
    return row!;
  }

  // ───── read ─────

  test('GET one chunk and the paginated chunks of a file', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'instance', institutionId: w.a1.id });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await makeChunk(upload, i, `Paragraph number ${i} about thermodynamics.`));

    const one = await t.app.inject({ method: 'GET', url: `/api/user/embedding/${ids[1]}`, headers: { 'x-access-token': tok.userA1! } });
    assert.equal(one.statusCode, 200);
    assert.deepEqual(one.json(), {
      success: true,
      data: { _id: ids[1], upload, index: 1, text: 'Paragraph number 1 about thermodynamics.', tokens: countTokens('Paragraph number 1 about thermodynamics.') },
    });
    // a colleague of the same institution sees it too
    assert.equal((await call(t, 'GET', `/api/user/embedding/${ids[1]}`, 'userA1b')).statusCode, 200);

    const page2 = await call(t, 'GET', `/api/user/files/${upload}/chunks?page=2&pageSize=2`, 'userA1');
    assert.equal(page2.statusCode, 200);
    const body = page2.json();
    assert.deepEqual(body.data.map((c: any) => c.index), [2, 3]);
    assert.deepEqual(body.data.map((c: any) => c._id), [ids[2], ids[3]]);
    assert.equal(body.total, 5);
    assert.equal(body.hasMore, true);
    assert.equal(body.page, 2);
    assert.equal(body.pageSize, 2);
    assert.equal(body.success, true);
    const last = (await call(t, 'GET', `/api/user/files/${upload}/chunks?page=3&pageSize=2`, 'userA1')).json();
    assert.deepEqual(last.data.map((c: any) => c.index), [4]);
    assert.equal(last.hasMore, false);
    const all = (await call(t, 'GET', `/api/user/files/${upload}/chunks`, 'userA1')).json();
    assert.equal(all.data.length, 5);
    assert.equal(all.pageSize, 100);

    for (const q of ['pageSize=0', 'pageSize=1001', 'page=0', 'page=abc']) {
      const res = await call(t, 'GET', `/api/user/files/${upload}/chunks?${q}`, 'userA1');
      assert.equal(res.statusCode, 400, q);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED', q);
    }
    assert.equal((await call(t, 'GET', '/api/user/embedding/not-a-uuid', 'userA1')).statusCode, 400);
    assert.equal((await call(t, 'GET', `/api/user/embedding/${newId()}`, 'userA1')).statusCode, 404);
    assert.equal((await call(t, 'GET', `/api/user/files/${newId()}/chunks`, 'userA1')).statusCode, 404);
    assert.equal((await t.app.inject({ method: 'GET', url: `/api/user/embedding/${ids[0]}` })).statusCode, 401);
  });

  // ───── update ─────

  test('PUT saves the text, recounts tokens, re-embeds and re-indexes', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal' });
    const chunk = await makeChunk(upload, 0, 'Menu | Home | About\n\nThe mitochondria is the powerhouse of the cell.');
    await makeChunk(upload, 1, 'Another chunk that stays as it is.');
    const before = await chunkRow(chunk);
    const uploadBefore = await uploadRow(upload);

    const newText = 'The mitochondria is the powerhouse of the cell. Photosynthesis happens in chloroplasts.';
    const res = await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'userA1', { sanitizedText: newText });
    assert.equal(res.statusCode, 200, res.body);
    const tokens = countTokens(newText);
    assert.deepEqual(res.json(), { success: true, data: { _id: chunk, upload, index: 0, text: newText, tokens } });

    const after = await chunkRow(chunk);
    assert.equal(after.text, newText);
    assert.equal(after.tokens, tokens);
    // the stored vector changed and is the embedder's vector of the new text
    const [expected] = await t.app.ctx.providers.embedder.embed([newText]);
    const stored = parseVector(after.embedding);
    assert.equal(stored.length, expected!.length);
    for (let i = 0; i < stored.length; i++) assert.ok(Math.abs(stored[i]! - expected![i]!) < 1e-6, `component ${i}`);
    assert.notDeepEqual(parseVector(before.embedding), stored);
    // the full-text index knows the new word, and forgot the removed one
    const [fts] = await rowsOf<{ new_word: boolean; old_word: boolean }>(
      t.database.db,
      sql`select tsv @@ plainto_tsquery('english', 'chloroplasts') as new_word, tsv @@ plainto_tsquery('english', 'menu') as old_word from chunks where id = ${chunk}`,
    );
    assert.deepEqual(fts, { new_word: true, old_word: false });
    // the file's text token total follows
    const uploadAfter = await uploadRow(upload);
    assert.equal(uploadAfter.textTokens, uploadBefore.textTokens - countTokens(before.text) + tokens);

    // `text` is accepted as well
    const manual = await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'userA1', { text: 'Hand edited.' });
    assert.equal(manual.statusCode, 200);
    assert.equal((await chunkRow(chunk)).text, 'Hand edited.');
  });

  test('PUT validation', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal' });
    const chunk = await makeChunk(upload, 0, 'Original text.');
    const cases: Array<[object, string]> = [
      [{}, 'sanitizedText'],
      [{ sanitizedText: '' }, 'sanitizedText'],
      [{ sanitizedText: '   \n ' }, 'sanitizedText'],
      [{ sanitizedText: 'x'.repeat(100_001) }, 'sanitizedText'],
      [{ sanitizedText: 42 }, 'sanitizedText'],
      [{ text: '' }, 'text'],
      [{ sanitizedText: '\u200b \u200d\u2060' }, 'sanitizedText'],
      [{ text: ' \u200e\u00ad ' }, 'text'],
      [{ sanitizedText: 'a', text: 'b' }, 'text'],
    ];
    for (const [payload, field] of cases) {
      const res = await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'userA1', payload);
      assert.equal(res.statusCode, 400, JSON.stringify(payload).slice(0, 60));
      assert.equal(res.json().success, false);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().error.details[0].field, field, JSON.stringify(payload).slice(0, 60));
    }
    assert.equal((await chunkRow(chunk)).text, 'Original text.');
    const longest = await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'userA1', { sanitizedText: 'word '.repeat(20_000) });
    assert.equal(longest.statusCode, 200);
  });

  test('PUT and sanitize need the right to change the file; chunks of deleted files are gone', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'instance', institutionId: w.a1.id });
    const chunk = await makeChunk(upload, 0, 'Shared institution text.');
    const colleague = await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'userA1b', { text: 'vandalised' });
    assert.equal(colleague.statusCode, 403);
    assert.equal(colleague.json().error.code, 'FORBIDDEN');
    assert.equal((await chunkRow(chunk)).text, 'Shared institution text.');
    const admin = await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'adminA1', { text: 'Fixed by the admin.' });
    assert.equal(admin.statusCode, 200);

    // sanitize is a preview for whoever can save it: a reader of the file gets 403 and spends nothing
    const reader = await call(t, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'userA1b');
    assert.equal(reader.statusCode, 403);
    assert.equal(reader.json().error.code, 'FORBIDDEN');
    assert.equal((await uploadRow(upload)).tokensUsed, 0);
    assert.equal((await call(t, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'adminA1')).statusCode, 200);
    assert.ok((await uploadRow(upload)).tokensUsed > 0);
    // account files: the account's administrator, not an institution admin of the account
    const accountFile = await makeUpload({ owner: w.userA1, scope: 'account', institutionId: w.a1.id });
    const accountChunk = await makeChunk(accountFile, 0, 'Account-wide text.');
    assert.equal((await call(t, 'PUT', `/api/user/embedding/${accountChunk}`, 'adminA1', { text: 'Changed.' })).statusCode, 403);
    assert.equal((await call(t, 'POST', `/api/user/embedding/${accountChunk}/sanitize`, 'adminA1')).statusCode, 403);

    // a deleted file's chunks leave with it (deleted in its transaction); any left behind are not served
    const deleted = await makeUpload({ owner: w.userA1, scope: 'personal', status: 'deleted' });
    const dc = await makeChunk(deleted, 0, 'Deleted file text.');
    assert.equal((await call(t, 'GET', `/api/user/embedding/${dc}`, 'userA1')).statusCode, 404);
    const put = await call(t, 'PUT', `/api/user/embedding/${dc}`, 'userA1', { text: 'x' });
    assert.equal(put.statusCode, 404);
    assert.equal((await chunkRow(dc)).text, 'Deleted file text.');
    assert.equal((await call(t, 'POST', `/api/user/embedding/${dc}/sanitize`, 'userA1')).statusCode, 404);
    assert.equal((await uploadRow(deleted)).tokensUsed, 0);
    assert.equal((await call(t, 'GET', `/api/user/files/${deleted}/chunks`, 'userA1')).json().total, 0);
  });

  test('chunks of a file still processing (written ahead in stages) are not readable until it is active', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal', status: 'processing' });
    const staged = await makeChunk(upload, 0, 'Staged chunk of a large file.');
    await makeChunk(upload, 1, 'Another staged chunk.');
    assert.equal((await call(t, 'GET', `/api/user/embedding/${staged}`, 'userA1')).statusCode, 404);
    const list = await call(t, 'GET', `/api/user/files/${upload}/chunks`, 'userA1');
    assert.equal(list.statusCode, 200); // the file is visible, it has no readable chunk yet
    assert.deepEqual([list.json().total, list.json().data], [0, []]);
    assert.equal((await call(t, 'PUT', `/api/user/embedding/${staged}`, 'userA1', { text: 'Too early.' })).statusCode, 404);
    assert.equal((await call(t, 'POST', `/api/user/embedding/${staged}/sanitize`, 'userA1')).statusCode, 404);
    assert.equal((await chunkRow(staged)).text, 'Staged chunk of a large file.');
    // once active, they are
    await t.database.db.execute(sql`update uploads set status = 'active' where id = ${upload}`);
    assert.equal((await call(t, 'GET', `/api/user/embedding/${staged}`, 'userA1')).statusCode, 200);
    assert.equal((await call(t, 'GET', `/api/user/files/${upload}/chunks`, 'userA1')).json().total, 2);
    // inactive and selected files keep readable chunks
    await t.database.db.execute(sql`update uploads set status = 'inactive' where id = ${upload}`);
    assert.equal((await call(t, 'GET', `/api/user/embedding/${staged}`, 'userA1')).statusCode, 200);
  });

  test('chunks of a file in error are neither readable nor editable; giving up on its job removes the staged chunks', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal', status: 'error' });
    const leftover = await makeChunk(upload, 0, 'Left over by an ingestion that died.');
    assert.equal((await call(t, 'GET', `/api/user/embedding/${leftover}`, 'userA1')).statusCode, 404);
    assert.deepEqual((await call(t, 'GET', `/api/user/files/${upload}/chunks`, 'userA1')).json().total, 0);
    assert.equal((await call(t, 'PUT', `/api/user/embedding/${leftover}`, 'userA1', { text: 'Edited.' })).statusCode, 404);
    assert.equal((await call(t, 'POST', `/api/user/embedding/${leftover}/sanitize`, 'userA1')).statusCode, 404);
    assert.equal((await chunkRow(leftover)).text, 'Left over by an ingestion that died.');

    // a job whose workers kept dying: the upload ends in error and the batches staged before are removed
    const staged = await makeUpload({ owner: w.userA1, scope: 'personal', status: 'processing' });
    await makeChunk(staged, 0, 'Staged batch one.');
    await makeChunk(staged, 1, 'Staged batch two.');
    const other = await makeUpload({ owner: w.userA1, scope: 'personal', status: 'active' });
    await makeChunk(other, 0, 'A chunk of another file.');
    const giveUp = ingestGiveUp({ db: t.database.db, clock: t.app.ctx.clock });
    await giveUp({ payload: { uploadId: staged } } as unknown as Job, 'worker died');
    const [row] = await rowsOf<{ status: string; error_message: string }>(t.database.db, sql`select status, error_message from uploads where id = ${staged}`);
    assert.deepEqual(row, { status: 'error', error_message: 'Ingestion failed: worker died' });
    const count = async (id: string) => Number((await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from chunks where upload_id = ${id}`))[0]!.n);
    assert.equal(await count(staged), 0);
    assert.equal(await count(other), 1);
    // an upload that is already in error is cleaned up too; an active one is left alone
    await giveUp({ payload: { uploadId: upload } } as unknown as Job, 'again');
    assert.equal(await count(upload), 0);
    await giveUp({ payload: { uploadId: other } } as unknown as Job, 'late report');
    assert.equal(await count(other), 1);
    assert.equal((await rowsOf<{ status: string }>(t.database.db, sql`select status from uploads where id = ${other}`))[0]!.status, 'active');

    // graph rows have no foreign key (their upload's trigger deletes them): rows a dead worker wrote after its
    // file was deleted are removed when its job is given up, or retried and finds the file gone
    const graphOf = async (id: string) =>
      Number((await rowsOf<{ n: number }>(t.database.db, sql`select (select count(*) from kg_entities where upload_id = ${id}) + (select count(*) from kg_edges where upload_id = ${id}) as n`))[0]!.n);
    for (const end of ['given up', 'retried'] as const) {
      const gone = newId();
      await t.database.db.execute(sql`insert into kg_entities (upload_id, name, kind, chunk_count) values (${gone}, 'orphan', 'name', 1)`);
      await t.database.db.execute(sql`insert into kg_edge_lists (upload_id, a, bs, ws) values (${gone}, 'a', '{b}', '{1}')`);
      assert.equal(await graphOf(gone), 2);
      if (end === 'given up') await giveUp({ payload: { uploadId: gone } } as unknown as Job, 'worker died');
      else {
        const outcome = await ingestUpload({ db: t.database.db, clock: t.app.ctx.clock } as unknown as IngestDeps, gone);
        assert.deepEqual(outcome, { status: 'skipped', reason: 'upload not found' });
      }
      assert.equal(await graphOf(gone), 0, end);
    }
  });

  test('sanitize is rate limited per user (SANITIZE_RATE_LIMIT_PER_MINUTE)', async () => {
    const limited = await startTestApp({ database: t.database, env: { SANITIZE_RATE_LIMIT_PER_MINUTE: '2', LOGIN_RATE_LIMIT_PER_EMAIL: '1000' } });
    try {
      const token = (await login(limited.app, w.userA1.email)).accessToken;
      const upload = await makeUpload({ owner: w.userA1, scope: 'personal' });
      const chunk = await makeChunk(upload, 0, 'Some   text   to   clean.');
      const sanitize = () => limited.app.inject({ method: 'POST', url: `/api/user/embedding/${chunk}/sanitize`, headers: bearer(token) });
      assert.equal((await sanitize()).statusCode, 200);
      assert.equal((await sanitize()).statusCode, 200);
      const spent = (await uploadRow(upload)).tokensUsed;
      const over = await sanitize();
      assert.equal(over.statusCode, 429);
      assert.equal(over.json().error.code, 'RATE_LIMITED');
      assert.ok(Number(over.headers['retry-after']) >= 1);
      assert.equal((await uploadRow(upload)).tokensUsed, spent, 'the refused call reached no model');
      // per user
      const other = (await login(limited.app, w.adminA1.email)).accessToken;
      const instUpload = await makeUpload({ owner: w.adminA1, scope: 'instance', institutionId: w.a1.id });
      const instChunk = await makeChunk(instUpload, 0, 'Admin text.');
      assert.equal((await limited.app.inject({ method: 'POST', url: `/api/user/embedding/${instChunk}/sanitize`, headers: bearer(other) })).statusCode, 200);
    } finally {
      await limited.close();
    }
  });

  test('PUT refuses while the stored vectors come from another embedder (no mixing)', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal' });
    const chunk = await makeChunk(upload, 0, 'Text embedded by the current embedder.');
    const embedder = t.app.ctx.providers.embedder;
    await writeEmbedderState(t.database.db, { id: 'some-other-embedder:v9', dimensions: embedder.dimensions, complete: true }, new Date());
    try {
      const res = await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'userA1', { text: 'New text.' });
      assert.equal(res.statusCode, 409);
      assert.equal(res.json().error.code, 'CONFLICT');
      assert.equal((await chunkRow(chunk)).text, 'Text embedded by the current embedder.');
    } finally {
      await writeEmbedderState(t.database.db, { id: embedder.id, dimensions: embedder.dimensions, complete: true }, new Date());
    }
    assert.equal((await call(t, 'PUT', `/api/user/embedding/${chunk}`, 'userA1', { text: 'New text.' })).statusCode, 200);
  });

  test('PUT: the embedder check is part of the write transaction (a change during the embedding call is caught)', async () => {
    const local = t.app.ctx.providers.embedder;
    // the real embedder, except that another node records another model while this vector is computed
    const racing: Embedder = {
      id: local.id,
      dimensions: local.dimensions,
      async embed(texts, options) {
        const vectors = await local.embed(texts, options);
        await writeEmbedderState(t.database.db, { id: 'another-node-model:v2', dimensions: local.dimensions, complete: false }, new Date());
        return vectors;
      },
    };
    const r = await startTestApp({ database: t.database, build: { providers: { embedder: racing } }, env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000' } });
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal' });
    const chunk = await makeChunk(upload, 0, 'Vector of the current model.');
    const before = await chunkRow(chunk);
    try {
      const token = (await login(r.app, w.userA1.email)).accessToken;
      const res = await r.app.inject({ method: 'PUT', url: `/api/user/embedding/${chunk}`, headers: bearer(token), payload: { text: 'A vector of the old model.' } });
      assert.equal(res.statusCode, 409, res.body);
      assert.equal(res.json().error.code, 'CONFLICT');
      assert.deepEqual(await chunkRow(chunk), before);
    } finally {
      await writeEmbedderState(t.database.db, { id: local.id, dimensions: local.dimensions, complete: true }, new Date());
      await r.close();
    }
  });

  // ───── isolation ─────

  test('isolation: other user, other institution, other account get 404 on every chunk route', async () => {
    const personal = await makeUpload({ owner: w.userA1, scope: 'personal' });
    const instance = await makeUpload({ owner: w.userA1, scope: 'instance', institutionId: w.a1.id });
    const account = await makeUpload({ owner: w.userA1, scope: 'account', institutionId: w.a1.id });
    const privateInst = await makeUpload({ owner: w.userA1, scope: 'instance', institutionId: w.a1.id, isPrivate: true });
    const chunkOf: Record<string, string> = {};
    for (const [name, id] of Object.entries({ personal, instance, account, privateInst })) chunkOf[id] = await makeChunk(id, 0, `Secret ${name} text.`);

    const cases: Array<[string, string]> = [
      ['userA1b', personal],
      ['userA1b', privateInst],
      ['userA2', personal],
      ['userA2', instance],
      ['userA2', privateInst],
      ['userB1', personal],
      ['userB1', instance],
      ['userB1', account],
    ];
    for (const [who, upload] of cases) {
      const chunk = chunkOf[upload]!;
      const label = `${who} on ${upload}`;
      const get = await call(t, 'GET', `/api/user/embedding/${chunk}`, who);
      assert.equal(get.statusCode, 404, label);
      assert.deepEqual(get.json(), { success: false, message: 'Embedding chunk not found', error: { code: 'NOT_FOUND', details: [] } });
      assert.equal((await call(t, 'GET', `/api/user/files/${upload}/chunks`, who)).statusCode, 404, label);
      assert.equal((await call(t, 'PUT', `/api/user/embedding/${chunk}`, who, { text: 'hijack' })).statusCode, 404, label);
      assert.equal((await call(t, 'POST', `/api/user/embedding/${chunk}/sanitize`, who)).statusCode, 404, label);
    }
    for (const id of [personal, instance, account, privateInst]) {
      assert.equal((await uploadRow(id)).tokensUsed, 0);
      assert.match((await chunkRow(chunkOf[id]!)).text, /^Secret /);
    }
    // account scope reaches the sibling institution
    assert.equal((await call(t, 'GET', `/api/user/embedding/${chunkOf[account]}`, 'userA2')).statusCode, 200);
  });

  // ───── sanitize with the local provider ─────

  test('sanitize with the local provider: whitespace normalised, preview only, tokens counted on the file', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal' });
    const messy = 'The   quick  brown\t\tfox\n\n\n\n\njumps over   the lazy dog.   ';
    const chunk = await makeChunk(upload, 0, messy);
    const res = await t.app.inject({ method: 'POST', url: `/api/user/embedding/${chunk}/sanitize`, headers: { 'x-access-token': tok.userA1! } });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.deepEqual(Object.keys(body).sort(), ['model', 'sanitizedText', 'success', 'tokensUsed']);
    assert.equal(body.success, true);
    assert.equal(body.model, t.app.ctx.providers.chatModel.defaultModel);
    assert.doesNotMatch(body.sanitizedText, / {2}|\t|\n{3}/);
    assert.match(body.sanitizedText, /^The quick brown fox\n*\s*jumps over the lazy dog\.$/);
    assert.ok(Number.isInteger(body.tokensUsed) && body.tokensUsed > 0);
    // not saved
    assert.equal((await chunkRow(chunk)).text, messy);
    assert.equal((await uploadRow(upload)).tokensUsed, body.tokensUsed);
    // a second preview adds up
    const again = (await call(t, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'userA1')).json();
    assert.equal((await uploadRow(upload)).tokensUsed, body.tokensUsed + again.tokensUsed);
    // each addition is a row of the file's token ledger (who, which chunk, which model), and the counter is their sum
    const ledger = await rowsOf<{ chunk_id: string; user_id: string; tokens: number; kind: string; model: string }>(
      t.database.db,
      sql`select chunk_id, user_id, tokens, kind, model from upload_token_ledger where upload_id = ${upload} order by created_at, tokens`,
    );
    assert.deepEqual(
      ledger.map((r) => [r.chunk_id, r.user_id, Number(r.tokens), r.kind, r.model]).sort(),
      [[chunk, w.userA1.id, body.tokensUsed, 'sanitize', body.model], [chunk, w.userA1.id, again.tokensUsed, 'sanitize', again.model]].sort(),
    );
  });

  test('sanitize never shortens a long chunk: it goes to the model in pieces and comes back whole', async () => {
    const upload = await makeUpload({ owner: w.userA1, scope: 'personal' });
    const long = Array.from({ length: 900 }, (_, i) => `Paragraph   ${i} says   something about   topic ${i % 17}. ${'More words follow here. '.repeat(3)}`).join('\n\n');
    assert.ok(long.length > 90_000);
    const chunk = await makeChunk(upload, 0, long);
    const res = await call(t, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'userA1');
    assert.equal(res.statusCode, 200, res.body.slice(0, 300));
    const text: string = res.json().sanitizedText;
    // the local model normalises whitespace only: every paragraph is there, in order, to the last one
    assert.equal(text.replace(/\s+/g, ' '), long.replace(/\s+/g, ' ').trim());
    assert.match(text, /Paragraph 899 says something about topic 15\./);
  });

  // ───── sanitize against a real OpenAI-compatible server ─────

  describe('sanitize through an OpenAI-compatible server', () => {
    let stub: OpenAiStub;
    let s: TestApp;
    let instWithModel: { id: string };
    let member: Owner & { email: string };

    before(async () => {
      stub = await startOpenAiStub();
      // a second app on the same database, talking to the stub
      s = await startTestApp({
        database: t.database,
        env: { LLM_PROVIDER: 'openai-compatible', LLM_BASE_URL: stub.baseUrl, LLM_MODEL: 'default-chat-model', LLM_MAX_RETRIES: '2', LOGIN_RATE_LIMIT_PER_EMAIL: '1000' },
      });
      instWithModel = await makeInstitution(t.database, w.accountA.id, { name: 'Summarised', summaryModel: 'inst-summary-model' });
      member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [instWithModel.id]: 'user' } });
      tok.member = (await login(s.app, member.email)).accessToken;
    });
    after(async () => {
      await s.close();
      await stub.close();
    });

    test('uses the institution summary model, the sanitize prompt and the chunk text; counts tokens', async () => {
      const upload = await makeUpload({ owner: member, scope: 'instance', institutionId: instWithModel.id });
      const text = 'Home > Docs > Intro\r\nWelcome   to the    course.\u00a0Â© 2024';
      const chunk = await makeChunk(upload, 0, text);
      stub.setChatHandler(({ model }) => ({ content: 'Welcome to the course.', usage: { prompt_tokens: 31, completion_tokens: 11 }, model: `${model}-2024-01` }));
      const seen = stub.requests.length;

      const res = await call(s, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'member');
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json(), { success: true, sanitizedText: 'Welcome to the course.', tokensUsed: 42, model: 'inst-summary-model-2024-01' });

      const requests = stub.requests.slice(seen);
      assert.equal(requests.length, 1);
      const sent = requests[0]!;
      assert.equal(sent.path, '/v1/chat/completions');
      assert.equal(sent.body.model, 'inst-summary-model');
      assert.deepEqual(
        sent.body.messages.map((m: any) => [m.role, m.content]),
        [
          ['system', SANITIZE_SYSTEM_PROMPT],
          ['user', text],
        ],
      );
      assert.equal((await uploadRow(upload)).tokensUsed, 42);
      assert.equal((await chunkRow(chunk)).text, text, 'preview only');
    });

    test('a long chunk is sent in pieces and joined; an answer cut at its length limit is a 502, not a shorter text', async () => {
      const upload = await makeUpload({ owner: member, scope: 'instance', institutionId: instWithModel.id });
      const long = Array.from({ length: 600 }, (_, i) => `Part ${i}: ${'text of the part. '.repeat(8)}`.trim()).join('\n\n');
      const chunk = await makeChunk(upload, 0, long);
      stub.setChatHandler(({ lastUserMessage }) => ({ content: `[${lastUserMessage.length}]`, usage: { prompt_tokens: 10, completion_tokens: 2 } }));
      const seen = stub.requests.length;
      const res = await call(s, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'member');
      assert.equal(res.statusCode, 200, res.body);
      const sent = stub.requests.slice(seen).map((r) => r.body.messages.at(-1).content as string);
      assert.ok(sent.length > 1 && sent.every((m) => m.length <= 8000));
      assert.equal(sent.join('\n\n'), long, 'every part of the text is sent once, in order');
      assert.equal(res.json().sanitizedText, sent.map((m) => `[${m.length}]`).join('\n\n'));
      assert.equal(res.json().tokensUsed, 12 * sent.length);

      const before = (await uploadRow(upload)).tokensUsed;
      stub.setChatHandler(() => ({ content: 'cut sho', usage: { prompt_tokens: 10, completion_tokens: 5 }, finishReason: 'length' }));
      const cut = await call(s, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'member');
      assert.equal(cut.statusCode, 502, cut.body);
      assert.equal(cut.json().error.code, 'UPSTREAM_FAILED');
      assert.equal((await uploadRow(upload)).tokensUsed, before + 15, 'the call that was made is counted');
      stub.setChatHandler(null);
    });

    test('without an override, and for personal files, the provider default model is used', async () => {
      stub.setChatHandler(null);
      const plainInst = await makeInstitution(t.database, w.accountA.id, { name: 'No override' });
      const plainMember = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [plainInst.id]: 'user' } });
      tok.plainMember = (await login(s.app, plainMember.email)).accessToken;
      const instUpload = await makeUpload({ owner: plainMember, scope: 'instance', institutionId: plainInst.id });
      const instChunk = await makeChunk(instUpload, 0, 'Some   institution text.');
      // the member of the institution WITH an override, on a personal file
      const personalUpload = await makeUpload({ owner: member, scope: 'personal' });
      const personalChunk = await makeChunk(personalUpload, 0, 'Some   personal text.');

      for (const [who, chunk, upload] of [
        ['plainMember', instChunk, instUpload],
        ['member', personalChunk, personalUpload],
      ] as const) {
        const seen = stub.requests.length;
        const res = await call(s, 'POST', `/api/user/embedding/${chunk}/sanitize`, who);
        assert.equal(res.statusCode, 200, res.body);
        const body = res.json();
        assert.equal(stub.requests[seen]!.body.model, 'default-chat-model');
        assert.equal(body.model, 'default-chat-model');
        assert.match(body.sanitizedText, /^Some (institution|personal) text\.$/);
        assert.equal((await uploadRow(upload)).tokensUsed, body.tokensUsed);
        assert.ok(body.tokensUsed > 0);
      }
    });

    test('20 concurrent sanitize calls on chunks of one upload add up exactly', async () => {
      const upload = await makeUpload({ owner: member, scope: 'instance', institutionId: instWithModel.id });
      const chunks: string[] = [];
      for (let i = 0; i < 4; i++) chunks.push(await makeChunk(upload, i, `Chunk ${i}   with    spaces.`));
      let n = 0;
      // every call reports a different usage
      stub.setChatHandler(({ lastUserMessage }) => {
        const k = ++n;
        return { content: lastUserMessage.replace(/\s+/g, ' '), usage: { prompt_tokens: 100 + k, completion_tokens: k } };
      });
      // The real provider, talking to the stub, behind a gate that hands all 20 results back in the same
      // tick: the 20 counter updates then truly overlap (a read-then-write would lose some of them).
      const real = createChatModel(s.config.llm);
      const finished: Array<() => void> = [];
      const gated: ChatModel = {
        provider: real.provider,
        defaultModel: real.defaultModel,
        stream: (request) => real.stream(request),
        async complete(request) {
          const result = await real.complete(request);
          await new Promise<void>((resolve) => {
            finished.push(resolve);
            if (finished.length === 20) for (const release of finished) release();
          });
          return result;
        },
      };
      const g = await startTestApp({ database: t.database, build: { providers: { chatModel: gated } }, env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000' } });
      try {
        const results = await Promise.all(Array.from({ length: 20 }, (_, i) => call(g, 'POST', `/api/user/embedding/${chunks[i % 4]}/sanitize`, 'member')));
        for (const r of results) assert.equal(r.statusCode, 200, r.body);
        assert.equal(stub.requests.filter((r) => r.body?.messages?.[1]?.content?.startsWith('Chunk ')).length >= 20, true);
        const reported = results.reduce((sum, r) => sum + r.json().tokensUsed, 0);
        let expected = 0;
        for (let k = 1; k <= 20; k++) expected += 100 + 2 * k;
        assert.equal(reported, expected);
        assert.equal((await uploadRow(upload)).tokensUsed, expected);
      } finally {
        await g.close();
      }
    });

    test('PUT: an embedding provider failing beyond its retries is a 502 and nothing changes', async () => {
      const e = await startTestApp({
        database: t.database,
        env: { EMBEDDINGS_PROVIDER: 'openai-compatible', EMBEDDINGS_BASE_URL: stub.baseUrl, EMBEDDINGS_MODEL: 'stub-embedding', EMBEDDINGS_MAX_RETRIES: '1', LOGIN_RATE_LIMIT_PER_EMAIL: '1000' },
      });
      const local = t.app.ctx.providers.embedder;
      const remote = e.app.ctx.providers.embedder;
      const upload = await makeUpload({ owner: member, scope: 'personal' });
      const chunk = await makeChunk(upload, 0, 'Before the failed edit.');
      const before = await chunkRow(chunk);
      // the stored vectors are declared to be the remote embedder's, so that the edit reaches it
      await writeEmbedderState(t.database.db, { id: remote.id, dimensions: remote.dimensions, complete: true }, new Date());
      try {
        const seen = stub.requestsTo('/v1/embeddings').length;
        stub.failNext(2, 500);
        const res = await call(e, 'PUT', `/api/user/embedding/${chunk}`, 'member', { sanitizedText: 'After the failed edit.' });
        assert.equal(res.statusCode, 502);
        assert.deepEqual(res.json(), { success: false, message: 'The embedding provider failed; the chunk was not changed', error: { code: 'UPSTREAM_FAILED', details: [] } });
        assert.equal(stub.requestsTo('/v1/embeddings').length - seen, 2);
        assert.deepEqual(await chunkRow(chunk), before);
        // and when it answers, its vector is stored
        const ok = await call(e, 'PUT', `/api/user/embedding/${chunk}`, 'member', { sanitizedText: 'After the edit.' });
        assert.equal(ok.statusCode, 200, ok.body);
        const [expected] = await remote.embed(['After the edit.']);
        const stored = parseVector((await chunkRow(chunk)).embedding);
        for (let i = 0; i < stored.length; i++) assert.ok(Math.abs(stored[i]! - expected![i]!) < 1e-6);
      } finally {
        await writeEmbedderState(t.database.db, { id: local.id, dimensions: local.dimensions, complete: true }, new Date());
        await e.close();
      }
    });

    test('a provider failing beyond its retries is a 502 with the contract body; nothing is counted', async () => {
      stub.setChatHandler(null);
      const upload = await makeUpload({ owner: member, scope: 'instance', institutionId: instWithModel.id });
      const chunk = await makeChunk(upload, 0, 'Text that will not be cleaned.');
      const seen = stub.requests.length;
      stub.failNext(3, 500); // the first try and 2 retries
      const res = await call(s, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'member');
      assert.equal(res.statusCode, 502);
      assert.deepEqual(res.json(), { success: false, message: 'The model provider failed; try again later', error: { code: 'UPSTREAM_FAILED', details: [] } });
      assert.equal(stub.requests.length - seen, 3);
      assert.equal((await uploadRow(upload)).tokensUsed, 0);
      // a failure within the retries is invisible to the caller
      stub.failNext(2, 500);
      const recovered = await call(s, 'POST', `/api/user/embedding/${chunk}/sanitize`, 'member');
      assert.equal(recovered.statusCode, 200);
      assert.equal((await uploadRow(upload)).tokensUsed, recovered.json().tokensUsed);
    });
  });
});
