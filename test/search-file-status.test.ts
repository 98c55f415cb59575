import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { RAG_ONLY_NOTHING_FOUND } from '../src/modules/conversation/qanda.service.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * Which files search and Q&A retrieval see, by status: `active` and `selected` (the spec's `excluded` filter is
 * "status in none of selected, deleted": a selected file is in use), not `inactive` (set aside by its owner). Searching
 * only `active` files made a file the user had selected vanish from search-content, its uploadCount and Q&A.
 */
describe('file statuses as search and Q&A retrieval see them', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let token: string;
  let fileId: string;
  const QUERY = 'Zorblax Quintavern Qorvath';

  const search = (payload: unknown) =>
    t.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: { ...bearer(token), 'content-type': 'application/json' }, payload: JSON.stringify(payload) });
  const setStatus = async (status: string) => {
    const res = await t.app.inject({ method: 'PATCH', url: `/api/user/files/${fileId}`, headers: bearer(token), payload: { status } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().data.status, status);
  };
  const found = async (payload: Record<string, unknown> = {}) => {
    const res = await search({ query: QUERY, ...payload });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().results.some((r: { uploadId: string }) => r.uploadId === fileId);
  };

  const ask = async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/ai/personal/qanda',
      headers: { 'x-access-token': token },
      payload: { inputs: ['Who founded the Hemlock Guild of Qorvath?'], outputs: [], requestArgs: { ragOnly: true } },
    });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().outputs.join('\n') as string;
  };

  before(async () => {
    t = await startTestApp({ env: { SEARCH_RATE_LIMIT_PER_MINUTE: '1000', QANDA_RATE_LIMIT_PER_MINUTE: '1000' } });
    w = await makeWorld(t.database);
    await t.database.db.execute(sql`update institutions set credits = 1000 where id = ${w.a1.id}`);
    token = (await login(t.app, w.userA1.email)).accessToken;
    const u = await uploadOk(t.app, token, { name: 'guild.txt', type: 'text/plain', content: 'Zorblax Quintavern founded the Hemlock Guild in the harbour town of Qorvath.' }, { scope: 'instance' });
    fileId = u._id;
    assert.equal((await waitForIngestion(t.app, token, fileId)).status, 'active');
  });
  after(() => t.close());

  test('an active file is found by search and grounds a ragOnly answer (baseline)', async () => {
    await setStatus('active');
    assert.equal(await found(), true);
    assert.match(await ask(), /Zorblax/);
  });

  test('a file whose status is set to "selected" is still found by content search', async () => {
    await setStatus('selected');
    assert.equal(await found(), true, 'the selected file disappeared from search-content');
    assert.equal(await found({ selectedUploadIds: [fileId] }), true, 'the selected file, asked for by id, was dropped from the scope');
    const res = await search({ query: QUERY });
    assert.ok(res.json().uploadCount >= 1, 'uploadCount does not count the selected file');
  });

  test('a file set aside (inactive) is neither searched nor counted; active again, it is back', async () => {
    await setStatus('inactive');
    assert.equal(await found(), false);
    assert.equal(await found({ selectedUploadIds: [fileId] }), false);
    assert.equal((await search({ query: QUERY, selectedUploadIds: [fileId] })).json().uploadCount, 0);
    await setStatus('active');
    assert.equal(await found(), true);
  });

  test('a file whose status is set to "selected" still grounds a Q&A answer (ragOnly)', async () => {
    await setStatus('selected');
    const answer = await ask();
    assert.notEqual(answer, RAG_ONLY_NOTHING_FOUND, 'Q&A retrieval does not see the selected file');
    assert.match(answer, /Zorblax/);
  });
});
