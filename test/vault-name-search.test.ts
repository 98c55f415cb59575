import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { uploadOk } from './support/uploads.js';

/**
 * fileNameSearch is a "case-insensitive substring filter on originalname" (spec, select-all-ids; the file list shares
 * it). Greek has two lower-case sigmas (σ, and ς at the end of a word), both the lower case of Σ; Postgres' lower()
 * gives σ only, so a word ending in ς never matched the same word in capitals. Both sides are now folded (db/search.ts).
 */
describe('fileNameSearch is case-insensitive for the Greek final sigma', () => {
  let t: TestApp;
  let token: string;
  const ids: Record<string, string> = {};

  before(async () => {
    t = await startTestApp();
    const w = await makeWorld(t.database);
    token = (await login(t.app, w.userA1.email)).accessToken;
    ids.upper = (await uploadOk(t.app, token, { name: 'ΟΔΟΣ plan.txt', type: 'text/plain', content: 'x' }, { scope: 'personal' }))._id;
    ids.lower = (await uploadOk(t.app, token, { name: 'λόγος notes.txt', type: 'text/plain', content: 'y' }, { scope: 'personal' }))._id;
  });
  after(() => t.close());

  async function found(term: string): Promise<{ list: string[]; selectAll: string[] }> {
    const list = await t.app.inject({ method: 'GET', url: `/api/user/files?scope=personal&fileNameSearch=${encodeURIComponent(term)}`, headers: bearer(token) });
    assert.equal(list.statusCode, 200, list.body);
    const all = await t.app.inject({ method: 'POST', url: '/api/user/collections/select-all-ids', headers: bearer(token), payload: { scope: 'personal', fileNameSearch: term } });
    assert.equal(all.statusCode, 200, all.body);
    return { list: list.json().data.map((d: { _id: string }) => d._id), selectAll: all.json().fileIds };
  }

  test('baseline: the same case finds the name', async () => {
    assert.deepEqual(await found('ΟΔΟΣ'), { list: [ids.upper], selectAll: [ids.upper] });
    assert.deepEqual(await found('λόγος'), { list: [ids.lower], selectAll: [ids.lower] });
  });

  test('"οδος" (lower case, final sigma) finds "ΟΔΟΣ plan.txt"', async () => {
    assert.deepEqual(await found('οδος'), { list: [ids.upper], selectAll: [ids.upper] });
  });

  test('"ΛΌΓΟΣ" (capitals) finds "λόγος notes.txt"', async () => {
    assert.deepEqual(await found('ΛΌΓΟΣ'), { list: [ids.lower], selectAll: [ids.lower] });
  });
});
