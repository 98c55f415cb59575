import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { newId } from '../src/shared/ids.js';
import { markDeleted, updateUpload } from '../src/modules/vault/uploads.repository.js';
import { bearer, login, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { multipartBody, uploadFile, uploadOk, waitForIngestion } from './support/uploads.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

const SPEC_FIELDS = ['_id', 'originalname', 'filesize', 'mimetype', 'file_title', 'institution', 'is_private', 'confidential', 'tokens_used'];

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
}

async function makeCollection(t: TestApp, fields: { scope: string; owner: string; institution: string | null; account: string; name?: string }) {
  const id = newId();
  await t.database.db.execute(
    sql`insert into collections (id, name, scope, owner_user_id, institution_id, account_id)
        values (${id}, ${fields.name ?? 'Folder'}, ${fields.scope}, ${fields.owner}, ${fields.institution}, ${fields.account})`,
  );
  return id;
}

describe('vault uploads: POST /api/user/files', () => {
  let t: TestApp;
  let w: World;
  let tokenA1: string;

  before(async () => {
    t = await startTestApp({ env: { UPLOAD_MAX_BYTES: '4096' } });
    w = await makeWorld(t.database);
    tokenA1 = (await login(t.app, w.userA1.email)).accessToken;
  });
  after(() => t.close());

  test('201 with the upload record: spec fields spelled exactly, defaults, form fields parsed', async () => {
    const res = await uploadFile(t.app, tokenA1, { name: 'Lecture 1.md', type: 'application/octet-stream', content: '# Optics\n\nLight bends in water.' }, { confidential: 'true' });
    assert.equal(res.statusCode, 201, res.body);
    const body = res.json();
    assert.equal(body.success, true);
    const d = body.data;
    for (const f of SPEC_FIELDS) assert.ok(f in d, `missing ${f}`);
    assert.equal(d.originalname, 'Lecture 1.md');
    assert.equal(d.filesize, Buffer.byteLength('# Optics\n\nLight bends in water.'));
    assert.equal(d.mimetype, 'text/markdown'); // from the detected format, not the client's claim
    assert.equal(d.file_title, 'Lecture 1.md');
    assert.equal(d.scope, 'instance'); // current institution → instance
    assert.equal(d.institution, w.a1.id);
    assert.equal(d.is_private, false);
    assert.equal(d.confidential, true);
    assert.equal(d.tokens_used, 0);
    assert.equal(d.owner, w.userA1.id);
    assert.equal(d.collection, null);
    assert.equal(d.status, 'processing');
    assert.equal(d.chunkCount, 0);
    assert.equal((await waitForIngestion(t.app, tokenA1, d._id)).status, 'active');
  });

  test('fields: scope personal has no institution; is_private, file_title; bad values are 400 with the field', async () => {
    const personal = await uploadOk(t.app, tokenA1, { name: 'me.txt', type: 'text/plain', content: 'mine' }, { scope: 'personal', institution: w.a1.id, file_title: '  My notes ', is_private: 'false' });
    assert.equal(personal.scope, 'personal');
    assert.equal(personal.institution, ''); // the spec types it `string (id)`: empty for a file of no institution
    assert.equal(personal.file_title, 'My notes');
    const priv = await uploadOk(t.app, tokenA1, { name: 'p.txt', type: 'text/plain', content: 'secret' }, { is_private: 'true', scope: 'account' });
    assert.equal(priv.is_private, true);
    assert.equal(priv.scope, 'account');
    assert.equal(priv.institution, w.a1.id);

    const bad = [
      [{ scope: 'galaxy' }, 'scope'],
      [{ is_private: 'yes' }, 'is_private'],
      [{ confidential: '1' }, 'confidential'],
      [{ institution: 'not-an-id' }, 'institution'],
      [{ collection: 'nope' }, 'collection'],
      [{ file_title: 'x'.repeat(501) }, 'file_title'],
    ] as const;
    for (const [fields, field] of bad) {
      const res = await uploadFile(t.app, tokenA1, { name: 'a.txt', type: 'text/plain', content: 'abc' }, fields);
      assert.equal(res.statusCode, 400, `${field}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().error.details[0].field, field);
    }
  });

  test('the file may come before the fields', async () => {
    const form = new FormData();
    form.append('file', new Blob(['order test']), 'late-fields.txt');
    form.append('scope', 'personal');
    const r = new Response(form);
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/user/files',
      headers: { ...bearer(tokenA1), 'content-type': r.headers.get('content-type')! },
      payload: Buffer.from(await r.arrayBuffer()),
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.json().data.scope, 'personal');
  });

  /** A multipart body with its parts in the given order (a field: [name, value]; the file: [name, content, filename]). */
  async function orderedUpload(token: string, parts: Array<[string, string] | [string, string, string]>, app = t.app) {
    const form = new FormData();
    for (const [name, value, filename] of parts) {
      if (filename === undefined) form.append(name, value);
      else form.append(name, new Blob([value], { type: 'text/plain' }), filename);
    }
    const r = new Response(form);
    return app.inject({ method: 'POST', url: '/api/user/files', headers: { ...bearer(token), 'content-type': r.headers.get('content-type')! }, payload: Buffer.from(await r.arrayBuffer()) });
  }

  test('fields before the file: a refused upload is refused before any byte is stored', async () => {
    // Every file here is over UPLOAD_MAX_BYTES (4096): storing it would answer 413. The refusal comes first.
    const big = { name: 'big.txt', type: 'text/plain', content: 'z'.repeat(5000) };
    const disabled = await makeInstitution(t.database, w.accountA.id, { disableFileUploadForUser: true });
    const full = await makeInstitution(t.database, w.accountA.id, { maxFiles: 1 });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [disabled.id]: 'user', [full.id]: 'user' } });
    const token = (await login(t.app, user.email)).accessToken;
    assert.equal((await uploadFile(t.app, token, { name: 'one.txt', content: 'the only slot' }, { institution: full.id })).statusCode, 201);
    const filesBefore = filesUnder(join(t.dataDir, 'files')).length;
    const [rowsBefore] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);

    const uploadsDisabled = await uploadFile(t.app, token, big, { institution: disabled.id });
    assert.equal(uploadsDisabled.statusCode, 403, uploadsDisabled.body);
    assert.equal(uploadsDisabled.json().message, 'File uploads are disabled for users of this institution: only its administrators may upload');
    const maxFiles = await uploadFile(t.app, token, big, { institution: full.id });
    assert.equal(maxFiles.statusCode, 403, maxFiles.body);
    assert.match(maxFiles.json().message, /reached its limit of 1 files/);
    const foreign = await uploadFile(t.app, token, big, { scope: 'instance', institution: w.b1.id });
    assert.equal(foreign.statusCode, 403, foreign.body);
    const noCollection = await uploadFile(t.app, token, big, { collection: newId() });
    assert.equal(noCollection.statusCode, 404, noCollection.body);
    assert.equal(noCollection.json().error.code, 'NOT_FOUND');
    assert.equal(noCollection.json().message, 'Collection not found');
    const badScope = await uploadFile(t.app, token, big, { scope: 'galaxy' });
    assert.equal(badScope.statusCode, 400);
    assert.equal(badScope.json().error.details[0].field, 'scope');

    assert.equal(filesUnder(join(t.dataDir, 'files')).length, filesBefore);
    const [rowsAfter] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);
    assert.equal(rowsAfter!.n, rowsBefore!.n);
    // allowed, the same file is measured: 413
    assert.equal((await uploadFile(t.app, token, big, { scope: 'personal' })).statusCode, 413);
  });

  test('file before the fields (curl -F order): stored, then the later fields decide in the transaction; a refusal leaves nothing', async () => {
    const disabled = await makeInstitution(t.database, w.accountA.id, { disableFileUploadForUser: true });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [disabled.id]: 'user' } });
    const token = (await login(t.app, user.email)).accessToken;
    const filesBefore = filesUnder(join(t.dataDir, 'files')).length;
    // the default placement (instance of the current institution) is refused; scope personal after the file allows it
    const late = await orderedUpload(token, [['file', 'late', 'late.txt'], ['scope', 'personal']]);
    assert.equal(late.statusCode, 201, late.body);
    assert.equal(late.json().data.scope, 'personal');
    assert.equal(late.json().data.institution, '');
    // the same through the helper (file part first, like curl -F and many FormData clients)
    const helper = await uploadFile(t.app, token, { name: 'helper.txt', content: 'file first' }, { scope: 'personal', file_title: 'Helper' }, { fileFirst: true });
    assert.equal(helper.statusCode, 201, helper.body);
    assert.equal(helper.json().data.file_title, 'Helper');
    assert.equal(filesUnder(join(t.dataDir, 'files')).length, filesBefore + 2);
    const [rowsBefore] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);
    // refused with every field: the real refusal, and the stored bytes are removed again
    const refused = await orderedUpload(token, [['file', 'late', 'late.txt'], ['scope', 'instance']]);
    assert.equal(refused.statusCode, 403, refused.body);
    assert.equal(refused.json().message, 'File uploads are disabled for users of this institution: only its administrators may upload');
    // no field at all: the default placement is refused in the transaction too
    const noFields = await orderedUpload(token, [['file', 'late', 'late.txt']]);
    assert.equal(noFields.statusCode, 403, noFields.body);
    assert.equal(filesUnder(join(t.dataDir, 'files')).length, filesBefore + 2);
    const [rowsAfter] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);
    assert.equal(rowsAfter!.n, rowsBefore!.n);
  });

  test('fields before the file: the early refusal stands; a destination field first and a lifting field after asks for the fields first', async () => {
    const disabled = await makeInstitution(t.database, w.accountA.id, { disableFileUploadForUser: true });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [disabled.id]: 'user' } });
    const token = (await login(t.app, user.email)).accessToken;
    const filesBefore = filesUnder(join(t.dataDir, 'files')).length;
    const early = await orderedUpload(token, [['scope', 'instance'], ['file', 'early', 'early.txt']]);
    assert.equal(early.statusCode, 403, early.body);
    // the deciding fields came first and were refused, so the bytes were dropped: a later field cannot bring them back
    const mixed = await orderedUpload(token, [['institution', disabled.id], ['file', 'late', 'late.txt'], ['scope', 'personal']]);
    assert.equal(mixed.statusCode, 400, mixed.body);
    assert.equal(mixed.json().error.details[0].field, 'file');
    assert.equal(mixed.json().message, 'Send the form fields before the file part: they decide whether and where the file may be stored');
    assert.equal(filesUnder(join(t.dataDir, 'files')).length, filesBefore);
    // fields first and allowed: fine
    const ok = await orderedUpload(token, [['scope', 'personal'], ['file', 'early', 'early.txt']]);
    assert.equal(ok.statusCode, 201, ok.body);
    assert.equal(ok.json().data.institution, '');
  });

  test('NUL characters in any multipart field: 400 naming the field, before the file is stored', async () => {
    const big = { name: 'big.txt', type: 'text/plain', content: 'z'.repeat(5000) }; // over the limit: storing it would be a 413
    for (const field of ['file_title', 'scope', 'institution', 'collection', 'is_private', 'confidential']) {
      const res = await uploadFile(t.app, tokenA1, big, { [field]: 'a\u0000b' });
      assert.equal(res.statusCode, 400, `${field}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().error.details[0].field, field);
      assert.match(res.json().message, /NUL/);
    }
    // after the file as well (the file is then stored and removed again)
    const late = await uploadFile(t.app, tokenA1, { name: 'ok.txt', content: 'fine' }, { file_title: 'a\u0000b' }, { fileFirst: true });
    assert.equal(late.statusCode, 400, late.body);
    assert.equal(late.json().error.details[0].field, 'file_title');
  });

  test('invisible characters: format characters (Cf) are stripped from titles; bidi overrides in file names become _', async () => {
    const d = await uploadOk(t.app, tokenA1, { name: 'evil\u202etxt.exe.txt', content: 'bidi' }, { file_title: '\u200bReport\u2066 \ufeff' });
    assert.equal(d.originalname, 'evil_txt.exe.txt'); // the override is marked, not silently dropped (issue 7 row 11)
    assert.equal(d.file_title, 'Report');
    // a title of nothing but format characters is blank: the file name is used
    const blank = await uploadOk(t.app, tokenA1, { name: 'plain.txt', content: 'x' }, { file_title: '\u200b\u200d' });
    assert.equal(blank.file_title, 'plain.txt');
    // a file name of nothing visible has no name
    const noName = await uploadFile(t.app, tokenA1, { name: '\u200b\u202e', content: 'x', type: 'text/plain' });
    assert.equal(noName.statusCode, 400, noName.body);
    assert.equal(noName.json().error.details[0].field, 'file');
    // PATCH: stripped too, and a blank result is refused
    const patched = await t.app.inject({ method: 'PATCH', url: `/api/user/files/${d._id}`, headers: bearer(tokenA1), payload: { file_title: 'New\u202e title' } });
    assert.equal(patched.statusCode, 200, patched.body);
    assert.equal(patched.json().data.file_title, 'New title');
    const invisible = await t.app.inject({ method: 'PATCH', url: `/api/user/files/${d._id}`, headers: bearer(tokenA1), payload: { file_title: '\u200b' } });
    assert.equal(invisible.statusCode, 400, invisible.body);
    assert.equal(invisible.json().error.details[0].field, 'file_title');
  });

  test('uploads are rate limited per user (UPLOAD_RATE_LIMIT_PER_MINUTE)', async () => {
    const limited = await startTestApp({ database: t.database, dataDir: t.dataDir, env: { UPLOAD_RATE_LIMIT_PER_MINUTE: '3', INGEST_WORKERS: '0' } });
    try {
      const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
      const token = (await login(limited.app, user.email)).accessToken;
      for (let i = 0; i < 3; i++) assert.equal((await uploadFile(limited.app, token, { name: `r${i}.txt`, content: 'x' }, { scope: 'personal' })).statusCode, 201);
      const [before] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads where owner_user_id = ${user.id}`);
      const over = await uploadFile(limited.app, token, { name: 'r3.txt', content: 'x' }, { scope: 'personal' });
      assert.equal(over.statusCode, 429);
      assert.equal(over.json().error.code, 'RATE_LIMITED');
      assert.ok(Number(over.headers['retry-after']) >= 1);
      const [after] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads where owner_user_id = ${user.id}`);
      assert.equal(after!.n, before!.n);
      // per user: someone else is not affected
      const other = (await login(limited.app, w.userA2.email)).accessToken;
      assert.equal((await uploadFile(limited.app, other, { name: 'o.txt', content: 'x' }, { scope: 'personal' })).statusCode, 201);
    } finally {
      await limited.close();
    }
  });

  test('401 without a token; 400 without a file or without multipart', async () => {
    const { payload, contentType } = await multipartBody({}, { name: 'a.txt', content: 'x' });
    const anon = await t.app.inject({ method: 'POST', url: '/api/user/files', headers: { 'content-type': contentType }, payload });
    assert.equal(anon.statusCode, 401);
    assert.equal(anon.json().error.code, 'UNAUTHENTICATED');
    const noFile = await uploadFile(t.app, tokenA1, undefined, { scope: 'personal' });
    assert.equal(noFile.statusCode, 400);
    assert.deepEqual(noFile.json(), {
      success: false,
      message: 'A file is required: send it as the multipart part "file"',
      error: { code: 'VALIDATION_FAILED', details: [{ field: 'file', message: 'A file is required: send it as the multipart part "file"' }] },
    });
    const json = await t.app.inject({ method: 'POST', url: '/api/user/files', headers: bearer(tokenA1), payload: { file: 'x' } });
    assert.equal(json.statusCode, 400);
    // broken multipart bodies are the client's error, never a 500 or a hang
    const broken = [
      ['multipart/form-data', 'garbage'],
      ['multipart/form-data; boundary=abc', 'garbage'],
      ['multipart/form-data; boundary=abc', '--abc\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\ntruncated'],
    ];
    for (const [type, payload] of broken) {
      const res = await t.app.inject({ method: 'POST', url: '/api/user/files', headers: { ...bearer(tokenA1), 'content-type': type! }, payload });
      assert.equal(res.statusCode, 400, res.body);
      assert.match(res.json().message, /^Malformed multipart body: /);
    }
    const empty = await uploadFile(t.app, tokenA1, { name: 'empty.txt', content: '' });
    assert.equal(empty.statusCode, 400);
    assert.equal(empty.json().message, 'The file is empty');
  });

  test('over UPLOAD_MAX_BYTES: 413 with the error body; nothing recorded, nothing left in storage', async () => {
    const before = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);
    const filesBefore = filesUnder(join(t.dataDir, 'files')).length;
    const res = await uploadFile(t.app, tokenA1, { name: 'big.txt', type: 'text/plain', content: 'a'.repeat(5000) });
    assert.equal(res.statusCode, 413);
    assert.deepEqual(res.json(), {
      success: false,
      message: 'The file is larger than the upload limit of 4096 bytes',
      error: { code: 'PAYLOAD_TOO_LARGE', details: [] },
    });
    const afterRows = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);
    assert.equal(afterRows[0]!.n, before[0]!.n);
    assert.equal(filesUnder(join(t.dataDir, 'files')).length, filesBefore);
    // exactly at the limit is fine
    assert.equal((await uploadFile(t.app, tokenA1, { name: 'edge.txt', content: 'b'.repeat(4096) })).statusCode, 201);
  });

  test('unsupported type: 400 naming the supported types; nothing recorded', async () => {
    const before = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);
    const res = await uploadFile(t.app, tokenA1, { name: 'tool.exe', type: 'application/x-msdownload', content: 'MZ\x90\x00' });
    assert.equal(res.statusCode, 400);
    const body = res.json();
    assert.equal(body.error.code, 'VALIDATION_FAILED');
    assert.equal(body.error.details[0].field, 'file');
    assert.equal(body.message, 'Unsupported file type "tool.exe" (application/x-msdownload). Supported types: txt, md, csv, json, html, pdf, docx');
    const afterRows = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads`);
    assert.equal(afterRows[0]!.n, before[0]!.n);
    // a second file part is refused too
    const form = new FormData();
    form.append('file', new Blob(['one']), 'one.txt');
    form.append('file', new Blob(['two']), 'two.txt');
    const r = new Response(form);
    const two = await t.app.inject({ method: 'POST', url: '/api/user/files', headers: { ...bearer(tokenA1), 'content-type': r.headers.get('content-type')! }, payload: Buffer.from(await r.arrayBuffer()) });
    assert.equal(two.statusCode, 400);
    assert.equal(two.json().message, 'Send exactly one file per request');
  });

  test('instance/account placement needs membership: 403 for a foreign institution', async () => {
    const res = await uploadFile(t.app, tokenA1, { name: 'x.txt', content: 'x' }, { scope: 'instance', institution: w.b1.id });
    assert.equal(res.statusCode, 403);
    assert.equal(res.json().error.code, 'FORBIDDEN');
  });

  test('maxFiles: the limit is enforced, also against concurrent uploads; deleted files free their slot', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { maxFiles: 3 });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const token = (await login(t.app, user.email)).accessToken;
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => uploadFile(t.app, token, { name: `f${i}.txt`, content: `file ${i}` })));
    const codes = results.map((r) => r.statusCode).sort();
    assert.deepEqual(codes, [201, 201, 201, 403, 403, 403]);
    const refused = results.find((r) => r.statusCode === 403)!.json();
    assert.equal(refused.message, 'This institution has reached its limit of 3 files (maxFiles): delete files or ask an administrator to raise the limit');
    const [count] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from uploads where institution_id = ${inst.id}`);
    assert.equal(count!.n, 3);
    // personal files do not count against an institution
    assert.equal((await uploadFile(t.app, token, { name: 'mine.txt', content: 'x' }, { scope: 'personal' })).statusCode, 201);
    const first = results.find((r) => r.statusCode === 201)!.json().data._id;
    assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/user/files/${first}`, headers: bearer(token) })).statusCode, 200);
    assert.equal((await uploadFile(t.app, token, { name: 'again.txt', content: 'x' })).statusCode, 201);
    assert.equal((await uploadFile(t.app, token, { name: 'over.txt', content: 'x' })).statusCode, 403);
  });

  test('disableFileUploadForUser: users get 403, the institution admins (vault.admin) may upload', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { disableFileUploadForUser: true });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const admin = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'admin' } });
    const userToken = (await login(t.app, user.email)).accessToken;
    const refused = await uploadFile(t.app, userToken, { name: 'x.txt', content: 'x' });
    assert.equal(refused.statusCode, 403);
    assert.equal(refused.json().message, 'File uploads are disabled for users of this institution: only its administrators may upload');
    assert.equal((await uploadFile(t.app, userToken, { name: 'x.txt', content: 'x' }, { scope: 'account' })).statusCode, 403);
    assert.equal((await uploadFile(t.app, userToken, { name: 'x.txt', content: 'x' }, { scope: 'personal' })).statusCode, 201);
    const adminToken = (await login(t.app, admin.email)).accessToken;
    assert.equal((await uploadFile(t.app, adminToken, { name: 'x.txt', content: 'x' })).statusCode, 201);
    // the account admin of the account holds vault.admin there too
    const accountAdmin = await makeUser(t.database, { accountId: w.accountA.id, role: 'accountadmin', memberships: { [inst.id]: 'user' } });
    const aaToken = (await login(t.app, accountAdmin.email)).accessToken;
    assert.equal((await uploadFile(t.app, aaToken, { name: 'x.txt', content: 'x' })).statusCode, 201);
  });

  test('collection: must be a visible collection of the same scope and place; its scope is the default', async () => {
    const instCol = await makeCollection(t, { scope: 'instance', owner: w.adminA1.id, institution: w.a1.id, account: w.accountA.id });
    const inCol = await uploadOk(t.app, tokenA1, { name: 'c.txt', content: 'in a folder' }, { collection: instCol });
    assert.equal(inCol.collection, instCol);
    assert.equal(inCol.scope, 'instance');
    const personalCol = await makeCollection(t, { scope: 'personal', owner: w.userA1.id, institution: null, account: w.accountA.id });
    const inPersonal = await uploadOk(t.app, tokenA1, { name: 'c.txt', content: 'mine' }, { collection: personalCol });
    assert.equal(inPersonal.scope, 'personal');
    // scope contradicts the collection
    const clash = await uploadFile(t.app, tokenA1, { name: 'c.txt', content: 'x' }, { collection: personalCol, scope: 'instance' });
    assert.equal(clash.statusCode, 400);
    assert.equal(clash.json().error.details[0].field, 'collection');
    // another institution's collection is invisible: 404, as if it did not exist
    const a2Col = await makeCollection(t, { scope: 'instance', owner: w.userA2.id, institution: w.a2.id, account: w.accountA.id });
    const foreign = await uploadFile(t.app, tokenA1, { name: 'c.txt', content: 'x' }, { collection: a2Col });
    assert.equal(foreign.statusCode, 404);
    assert.equal(foreign.json().message, 'Collection not found');
    // 'root' means no collection
    assert.equal((await uploadOk(t.app, tokenA1, { name: 'r.txt', content: 'x' }, { collection: 'root' })).collection, null);
  });
});

describe('vault uploads: list, get, download, patch, delete', () => {
  let t: TestApp;
  let w: World;
  let tokenA1: string;

  before(async () => {
    t = await startTestApp();
    w = await makeWorld(t.database);
    tokenA1 = (await login(t.app, w.userA1.email)).accessToken;
  });
  after(() => t.close());

  test('download returns the original bytes with type and a safely encoded name', async () => {
    const name = 'Résumé "final" ✓.csv';
    const content = 'name,score\nÅsa,10\n';
    const up = await uploadOk(t.app, tokenA1, { name, type: 'text/csv', content });
    assert.equal(up.originalname, 'Résumé %22final%22 ✓.csv'); // the browser form encoding of " is kept as sent
    const res = await t.app.inject({ method: 'GET', url: `/api/user/files/${up._id}/download`, headers: bearer(tokenA1) });
    assert.equal(res.statusCode, 200);
    assert.equal(res.body, content);
    assert.equal(res.headers['content-type'], 'text/csv');
    assert.equal(res.headers['x-content-type-options'], 'nosniff');
    const cd = String(res.headers['content-disposition']);
    assert.match(cd, /^attachment; filename="R_sum_ %22final%22 _\.csv"; filename\*=UTF-8''/);
    assert.equal(decodeURIComponent(cd.split("UTF-8''")[1]!), up.originalname);
    assert.ok(/^[\x20-\x7e]+$/.test(cd));
  });

  test('fileNameSearch finds a name as it was uploaded: letters Postgres and JavaScript lower-case differently, NFD, repeated spaces', async () => {
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const token = (await login(t.app, member.email)).accessToken;
    const names = ['İstanbul notes.txt', 'ΟΔΟΣ plan.txt', 'Cafe\u0301 menu.txt', 'Q3  report.txt', 'tab\there\u200b.txt'];
    const ids: string[] = [];
    for (const name of names) ids.push((await uploadOk(t.app, token, { name, content: 'x' }, { scope: 'personal' }))._id);
    const found = async (term: string) => {
      const list = await t.app.inject({ method: 'GET', url: `/api/user/files?scope=personal&fileNameSearch=${encodeURIComponent(term)}`, headers: bearer(token) });
      assert.equal(list.statusCode, 200, list.body);
      const all = await t.app.inject({ method: 'POST', url: '/api/user/collections/select-all-ids', headers: bearer(token), payload: { scope: 'personal', fileNameSearch: term } });
      assert.equal(all.statusCode, 200, all.body);
      const a = list.json().data.map((x: { _id: string }) => x._id).sort();
      assert.deepEqual(all.json().fileIds.slice().sort(), a, `both routes agree on ${term}`);
      return a;
    };
    assert.deepEqual(await found('İstanbul'), [ids[0]]);
    assert.deepEqual(await found('istanbul'), [ids[0]]);
    assert.deepEqual(await found('ΟΔΟΣ'), [ids[1]]);
    assert.deepEqual(await found('Cafe\u0301'), [ids[2]]);
    assert.deepEqual(await found('Café'), [ids[2]]);
    assert.deepEqual(await found('Q3  report'), [ids[3]]);
    assert.deepEqual(await found('x'.repeat(300)), []);
    // a control character is stored as "_" and a zero-width one dropped: a term holding them finds the name as stored
    assert.deepEqual(await found('tab\there\u200b.txt'), [ids[4]]);
  });

  test('list: filters by status, collection, fileNameSearch (% and _ literal), scope; paginates', async () => {
    // a fresh institution and member, so that only this test's files are in view
    const inst = await makeInstitution(t.database, w.accountA.id);
    const member = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const tokenA1 = (await login(t.app, member.email)).accessToken;
    const folder = await makeCollection(t, { scope: 'instance', owner: member.id, institution: inst.id, account: w.accountA.id });
    const a = await uploadOk(t.app, tokenA1, { name: '100%_done.txt', content: 'percent' }, { collection: folder });
    const b = await uploadOk(t.app, tokenA1, { name: '100x-done.txt', content: 'no percent' });
    const c = await uploadOk(t.app, tokenA1, { name: 'SELECTED.md', content: '# sel' });
    const d = await uploadOk(t.app, tokenA1, { name: 'gone.txt', content: 'bye' });
    const p = await uploadOk(t.app, tokenA1, { name: 'mine.txt', content: 'personal' }, { scope: 'personal' });
    for (const x of [a, b, c, d, p]) await waitForIngestion(t.app, tokenA1, x._id);
    await t.app.inject({ method: 'PATCH', url: `/api/user/files/${c._id}`, headers: bearer(tokenA1), payload: { status: 'selected' } });
    await t.app.inject({ method: 'DELETE', url: `/api/user/files/${d._id}`, headers: bearer(tokenA1) });
    const list = async (qs: string) => {
      const res = await t.app.inject({ method: 'GET', url: `/api/user/files?${qs}`, headers: bearer(tokenA1) });
      assert.equal(res.statusCode, 200, res.body);
      return res.json();
    };
    const ids = (body: { data: Array<{ _id: string }> }) => body.data.map((x) => x._id).sort();

    const all = await list('');
    assert.deepEqual(Object.keys(all).sort(), ['data', 'hasMore', 'message', 'page', 'pageSize', 'success', 'total']);
    assert.deepEqual(ids(all), [a, b, c, p].map((x) => x._id).sort()); // personal + current institution, not deleted
    assert.deepEqual(ids(await list('status=deleted')), [d._id]);
    assert.deepEqual(ids(await list('status=selected')), [c._id]);
    assert.deepEqual(ids(await list('status=excluded')), [a, b, p].map((x) => x._id).sort());
    assert.deepEqual(ids(await list('status=active')), [a, b, p].map((x) => x._id).sort());
    assert.deepEqual(ids(await list(`collection=${folder}`)), [a._id]);
    assert.deepEqual(ids(await list('collection=root&scope=instance')), [b, c].map((x) => x._id).sort());
    assert.deepEqual(ids(await list(`fileNameSearch=${encodeURIComponent('100%_')}`)), [a._id]);
    assert.deepEqual(ids(await list('fileNameSearch=selected')), [c._id]);
    // a blank search is no filter (as in select-all-ids); otherwise its spaces are part of it
    assert.deepEqual(ids(await list(`fileNameSearch=${encodeURIComponent('   ')}`)), ids(all));
    assert.deepEqual(ids(await list(`fileNameSearch=${encodeURIComponent(' done')}`)), []);
    assert.deepEqual(ids(await list('scope=personal')), [p._id]);
    const page1 = await list('scope=instance&pageSize=2&page=1');
    const page2 = await list('scope=instance&pageSize=2&page=2');
    assert.equal(page1.total, 3);
    assert.equal(page1.hasMore, true);
    assert.equal(page2.hasMore, false);
    assert.equal(page1.data.length + page2.data.length, 3);
    // newest first
    assert.deepEqual(page1.data.map((x: { _id: string }) => x._id), [c._id, b._id]);

    for (const bad of ['status=bogus', 'scope=galaxy', 'collection=not-an-id', 'pageSize=0', 'pageSize=5001', 'page=0']) {
      const res = await t.app.inject({ method: 'GET', url: `/api/user/files?${bad}`, headers: bearer(tokenA1) });
      assert.equal(res.statusCode, 400, bad);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    }
    const foreign = await t.app.inject({ method: 'GET', url: `/api/user/files?institution=${w.b1.id}`, headers: bearer(tokenA1) });
    assert.equal(foreign.statusCode, 403);

    // `processing` is a filter value too (the same filter as select-all-ids); `excluded` keeps such files
    const pending = newId();
    await t.database.db.execute(
      sql`insert into uploads (id, originalname, filesize, mimetype, scope, owner_user_id, institution_id, account_id, status, storage_key, sha256)
          values (${pending}, 'pending.txt', 1, 'text/plain', 'instance', ${member.id}, ${inst.id}, ${w.accountA.id}, 'processing', ${`test/${pending}`}, ${'0'.repeat(64)})`,
    );
    assert.deepEqual(ids(await list('status=processing')), [pending]);
    assert.ok(ids(await list('status=excluded')).includes(pending));
    assert.ok(!ids(await list('status=active')).includes(pending));
  });

  test('patch: title, status, collection, flags; the rules of each', async () => {
    const up = await uploadOk(t.app, tokenA1, { name: 'p.txt', content: 'patch me' });
    const patch = (id: string, payload: object, token = tokenA1) => t.app.inject({ method: 'PATCH', url: `/api/user/files/${id}`, headers: bearer(token), payload });

    // A file still being ingested: its status cannot change yet (a row held in `processing`, so the
    // answer does not depend on how fast the worker is).
    const pending = newId();
    await t.database.db.execute(
      sql`insert into uploads (id, originalname, filesize, mimetype, scope, owner_user_id, account_id, status, storage_key, sha256)
          values (${pending}, 'pending.txt', 1, 'text/plain', 'personal', ${w.userA1.id}, ${w.accountA.id}, 'processing', ${`test/${pending}`}, ${'0'.repeat(64)})`,
    );
    const early = await patch(pending, { status: 'inactive' });
    assert.equal(early.statusCode, 409, early.body);
    assert.equal(early.json().error.code, 'CONFLICT');
    assert.equal(early.json().message, 'The file is still being processed; its status can change once ingestion has finished');
    await waitForIngestion(t.app, tokenA1, up._id);

    const res = await patch(up._id, { file_title: 'Patched', status: 'inactive', confidential: true });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().data.file_title, 'Patched');
    assert.equal(res.json().data.status, 'inactive');
    assert.equal(res.json().data.confidential, true);
    assert.equal((await patch(up._id, { status: 'deleted' })).statusCode, 400);
    assert.equal((await patch(up._id, { status: 'error' })).statusCode, 400);
    assert.equal((await patch(up._id, { confidential: 'yes' })).statusCode, 400);

    const folder = await makeCollection(t, { scope: 'instance', owner: w.adminA1.id, institution: w.a1.id, account: w.accountA.id });
    const moved = await patch(up._id, { collection: folder });
    assert.equal(moved.json().data.collection, folder);
    assert.equal((await patch(up._id, { collection: null })).json().data.collection, null);
    const personalFolder = await makeCollection(t, { scope: 'personal', owner: w.userA1.id, institution: null, account: w.accountA.id });
    const wrong = await patch(up._id, { collection: personalFolder });
    assert.equal(wrong.statusCode, 400);
    assert.equal(wrong.json().error.details[0].field, 'collection');
    const a2Folder = await makeCollection(t, { scope: 'instance', owner: w.userA2.id, institution: w.a2.id, account: w.accountA.id });
    assert.equal((await patch(up._id, { collection: a2Folder })).statusCode, 404);

    // an error file cannot be activated
    const broken = await uploadOk(t.app, tokenA1, { name: 'broken.pdf', content: '%PDF-1.7 but nothing of a PDF after the header' });
    assert.equal((await waitForIngestion(t.app, tokenA1, broken._id)).status, 'error');
    const conflict = await patch(broken._id, { status: 'active' });
    assert.equal(conflict.statusCode, 409);
    assert.equal(conflict.json().error.code, 'CONFLICT');

    // the institution admin may change it, but not its privacy; making it private is the owner's call
    const adminToken = (await login(t.app, w.adminA1.email)).accessToken;
    assert.equal((await patch(up._id, { file_title: 'By admin' }, adminToken)).statusCode, 200);
    const privacy = await patch(up._id, { is_private: true }, adminToken);
    assert.equal(privacy.statusCode, 403);
    assert.equal(privacy.json().message, 'Only the owner may change is_private');
    assert.equal((await patch(up._id, { is_private: true })).json().data.is_private, true);
  });

  test('delete: status deleted, chunks gone at once, bytes removed; idempotent', async () => {
    const up = await uploadOk(t.app, tokenA1, { name: 'del.txt', content: 'The ibis wades in shallow water.' });
    await waitForIngestion(t.app, tokenA1, up._id);
    const [row] = await rowsOf<{ storage_key: string }>(t.database.db, sql`select storage_key from uploads where id = ${up._id}`);
    const path = join(t.dataDir, 'files', ...row!.storage_key.split('/'));
    assert.ok(existsSync(path));
    const [before] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from chunks where upload_id = ${up._id}`);
    assert.ok(before!.n > 0);

    const res = await t.app.inject({ method: 'DELETE', url: `/api/user/files/${up._id}`, headers: bearer(tokenA1) });
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().data.status, 'deleted');
    assert.equal(res.json().data.chunkCount, 0);
    const [afterRow] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from chunks where upload_id = ${up._id}`);
    assert.equal(afterRow!.n, 0);
    assert.equal(existsSync(path), false);
    assert.equal((await t.app.inject({ method: 'GET', url: `/api/user/files/${up._id}/download`, headers: bearer(tokenA1) })).statusCode, 404);
    assert.equal((await t.app.inject({ method: 'GET', url: `/api/user/files/${up._id}`, headers: bearer(tokenA1) })).json().data.status, 'deleted');
    assert.equal((await t.app.inject({ method: 'PATCH', url: `/api/user/files/${up._id}`, headers: bearer(tokenA1), payload: { file_title: 'x' } })).statusCode, 409);
    assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/user/files/${up._id}`, headers: bearer(tokenA1) })).statusCode, 200);
  });

  test('PATCH racing DELETE never resurrects a deleted file; a deleted row is never updated', async () => {
    for (let i = 0; i < 4; i++) {
      const up = await uploadOk(t.app, tokenA1, { name: `race-${i}.txt`, content: `Race number ${i} of the heron.` });
      await waitForIngestion(t.app, tokenA1, up._id);
      const [patched, deleted] = await Promise.all([
        t.app.inject({ method: 'PATCH', url: `/api/user/files/${up._id}`, headers: bearer(tokenA1), payload: { status: 'selected' } }),
        t.app.inject({ method: 'DELETE', url: `/api/user/files/${up._id}`, headers: bearer(tokenA1) }),
      ]);
      assert.equal(deleted.statusCode, 200, deleted.body);
      assert.ok([200, 409].includes(patched.statusCode), patched.body);
      const [row] = await rowsOf<{ status: string }>(t.database.db, sql`select status from uploads where id = ${up._id}`);
      assert.equal(row!.status, 'deleted');
      // and a PATCH after the delete is refused
      const late = await t.app.inject({ method: 'PATCH', url: `/api/user/files/${up._id}`, headers: bearer(tokenA1), payload: { status: 'selected' } });
      assert.equal(late.statusCode, 409);
    }
    // the guard of the UPDATE itself, without the service's checks before it
    const up = await uploadOk(t.app, tokenA1, { name: 'guard.txt', content: 'Guarded update.' });
    assert.equal(await updateUpload(t.database.db, up._id, { status: 'selected' }, new Date(), { statusIn: ['active', 'inactive', 'selected'] }), undefined); // still processing
    await waitForIngestion(t.app, tokenA1, up._id);
    assert.equal((await markDeleted(t.database.db, up._id, new Date()))?.status, 'deleted');
    assert.equal(await markDeleted(t.database.db, up._id, new Date()), undefined);
    assert.equal(await updateUpload(t.database.db, up._id, { status: 'selected', fileTitle: 'back' }, new Date()), undefined);
    const [row] = await rowsOf<{ status: string; file_title: string }>(t.database.db, sql`select status, file_title from uploads where id = ${up._id}`);
    assert.deepEqual(row, { status: 'deleted', file_title: 'guard.txt' });
  });

  test('malformed ids are 400, unknown ids 404, no token 401', async () => {
    for (const [method, suffix] of [['GET', ''], ['GET', '/download'], ['PATCH', ''], ['DELETE', '']] as const) {
      const payload = method === 'PATCH' ? { file_title: 'x' } : undefined;
      assert.equal((await t.app.inject({ method, url: `/api/user/files/nope${suffix}`, headers: bearer(tokenA1), payload })).statusCode, 400);
      assert.equal((await t.app.inject({ method, url: `/api/user/files/${newId()}${suffix}`, headers: bearer(tokenA1), payload })).statusCode, 404);
      assert.equal((await t.app.inject({ method, url: `/api/user/files/${newId()}${suffix}`, payload })).statusCode, 401);
    }
    assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/files' })).statusCode, 401);
  });
});

describe('vault uploads: scope isolation on every route', () => {
  let t: TestApp;
  let w: World;
  const tokens: Record<string, string> = {};
  let otherA1: Awaited<ReturnType<typeof makeUser>>;
  let multi: Awaited<ReturnType<typeof makeUser>>;
  const files: Record<string, string> = {};

  before(async () => {
    t = await startTestApp();
    w = await makeWorld(t.database);
    otherA1 = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    // a member of A2 (current) and B1: sees account A files through A2, account B files through B1
    multi = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a2.id]: 'user', [w.b1.id]: 'user' } });
    for (const [k, u] of Object.entries({
      userA1: w.userA1,
      otherA1,
      adminA1: w.adminA1,
      userA2: w.userA2,
      userB1: w.userB1,
      accountAdminA: w.accountAdminA,
      accountAdminB: w.accountAdminB,
      superadmin: w.superadmin,
      multi,
    })) {
      tokens[k] = (await login(t.app, u.email)).accessToken;
    }
    const up = async (key: string, fields: Record<string, string>) => {
      files[key] = (await uploadOk(t.app, tokens.userA1!, { name: `${key}.txt`, content: `content of ${key}` }, fields))._id;
    };
    await up('instanceA1', { scope: 'instance' });
    await up('accountA', { scope: 'account' });
    await up('personalA1', { scope: 'personal' });
    await up('privateA1', { scope: 'instance', is_private: 'true' });
    for (const id of Object.values(files)) await waitForIngestion(t.app, tokens.userA1!, id);
  });
  after(() => t.close());

  /** What a caller can do with a file on each route: 'ok' (200), 403 or 404. */
  async function access(who: string, key: string) {
    const id = files[key]!;
    const h = bearer(tokens[who]!);
    const get = (await t.app.inject({ method: 'GET', url: `/api/user/files/${id}`, headers: h })).statusCode;
    const download = (await t.app.inject({ method: 'GET', url: `/api/user/files/${id}/download`, headers: h })).statusCode;
    const listed = (
      await Promise.all(
        ['', '?scope=instance', '?scope=account', '?scope=personal', '?status=excluded'].map(async (qs) => {
          const res = await t.app.inject({ method: 'GET', url: `/api/user/files${qs}`, headers: h });
          assert.equal(res.statusCode, 200, res.body);
          return res.json().data.some((f: { _id: string }) => f._id === id);
        }),
      )
    ).some(Boolean);
    // a harmless change (title back to itself) and a delete that must not happen unless allowed
    const patch = (await t.app.inject({ method: 'PATCH', url: `/api/user/files/${id}`, headers: h, payload: { file_title: `${key}.txt` } })).statusCode;
    return { get, download, listed, patch };
  }

  const hidden = { get: 404, download: 404, listed: false, patch: 404 };
  const readOnly = { get: 200, download: 200, listed: true, patch: 403 };
  const full = { get: 200, download: 200, listed: true, patch: 200 };

  test('instance file of A1: members of A1 read it; its admins and the owner change it; A2, B1 and their admins never see it', async () => {
    assert.deepEqual(await access('userA1', 'instanceA1'), full);
    assert.deepEqual(await access('otherA1', 'instanceA1'), readOnly);
    assert.deepEqual(await access('adminA1', 'instanceA1'), full);
    assert.deepEqual(await access('accountAdminA', 'instanceA1'), full); // member of A1 and account admin of A
    assert.deepEqual(await access('userA2', 'instanceA1'), hidden);
    assert.deepEqual(await access('multi', 'instanceA1'), hidden);
    assert.deepEqual(await access('userB1', 'instanceA1'), hidden);
    assert.deepEqual(await access('accountAdminB', 'instanceA1'), hidden);
    assert.deepEqual(await access('superadmin', 'instanceA1'), hidden); // administration does not widen reading
  });

  test('account file: members of every institution of account A read it; account B never', async () => {
    assert.deepEqual(await access('userA1', 'accountA'), full);
    assert.deepEqual(await access('otherA1', 'accountA'), readOnly);
    assert.deepEqual(await access('userA2', 'accountA'), readOnly);
    assert.deepEqual(await access('multi', 'accountA'), readOnly);
    // an institution admin administers one institution, not what the whole account shares: the account admin does
    assert.deepEqual(await access('adminA1', 'accountA'), readOnly);
    assert.deepEqual(await access('accountAdminA', 'accountA'), full);
    assert.deepEqual(await access('userB1', 'accountA'), hidden);
    assert.deepEqual(await access('accountAdminB', 'accountA'), hidden);
  });

  test('account file: an account admin without any enrolment sees and moderates it; nothing else is widened', async () => {
    const unenrolled = await makeUser(t.database, { accountId: w.accountA.id, role: 'accountadmin' });
    const unenrolledB = await makeUser(t.database, { accountId: w.accountB.id, role: 'accountadmin' });
    tokens.unenrolledAdminA = (await login(t.app, unenrolled.email)).accessToken;
    tokens.unenrolledAdminB = (await login(t.app, unenrolledB.email)).accessToken;
    const h = bearer(tokens.unenrolledAdminA);
    const got = await t.app.inject({ method: 'GET', url: `/api/user/files/${files.accountA}`, headers: h });
    assert.equal(got.statusCode, 200, got.body);
    assert.equal((await t.app.inject({ method: 'GET', url: `/api/user/files/${files.accountA}/download`, headers: h })).statusCode, 200);
    const patched = await t.app.inject({ method: 'PATCH', url: `/api/user/files/${files.accountA}`, headers: h, payload: { confidential: true } });
    assert.equal(patched.statusCode, 200, patched.body);
    assert.equal(patched.json().data.confidential, true);
    const chunks = await t.app.inject({ method: 'GET', url: `/api/user/files/${files.accountA}/chunks`, headers: h });
    assert.equal(chunks.statusCode, 200, chunks.body);
    assert.ok(chunks.json().total > 0);
    for (const key of ['instanceA1', 'personalA1', 'privateA1']) {
      assert.equal((await t.app.inject({ method: 'GET', url: `/api/user/files/${files[key]}`, headers: h })).statusCode, 404, key);
    }
    assert.equal((await t.app.inject({ method: 'GET', url: `/api/user/files/${files.accountA}`, headers: bearer(tokens.unenrolledAdminB) })).statusCode, 404);
    assert.equal((await t.app.inject({ method: 'PATCH', url: `/api/user/files/${files.accountA}`, headers: h, payload: { confidential: false } })).statusCode, 200);
  });

  test('personal and private files: only their owner', async () => {
    for (const key of ['personalA1', 'privateA1']) {
      assert.deepEqual(await access('userA1', key), full);
      for (const who of ['otherA1', 'adminA1', 'accountAdminA', 'userA2', 'userB1', 'superadmin']) assert.deepEqual(await access(who, key), hidden, `${who} on ${key}`);
    }
  });

  test('delete: 404 for those who cannot see, 403 for readers, allowed for an admin of the institution', async () => {
    const del = async (who: string, key: string) => (await t.app.inject({ method: 'DELETE', url: `/api/user/files/${files[key]}`, headers: bearer(tokens[who]!) })).statusCode;
    assert.equal(await del('userA2', 'instanceA1'), 404);
    assert.equal(await del('userB1', 'accountA'), 404);
    assert.equal(await del('adminA1', 'privateA1'), 404);
    assert.equal(await del('adminA1', 'personalA1'), 404);
    assert.equal(await del('otherA1', 'instanceA1'), 403);
    assert.equal(await del('userA2', 'accountA'), 403);
    assert.equal(await del('adminA1', 'accountA'), 403);
    const status = async (key: string) => (await rowsOf<{ status: string }>(t.database.db, sql`select status from uploads where id = ${files[key]!}`))[0]!.status;
    for (const key of ['instanceA1', 'accountA', 'privateA1', 'personalA1']) assert.equal(await status(key), 'active');
    assert.equal(await del('adminA1', 'instanceA1'), 200);
    assert.equal(await status('instanceA1'), 'deleted');
    assert.equal(await del('userA1', 'personalA1'), 200);
  });

  test('listing by a foreign institution is 403, never a leak', async () => {
    const res = await t.app.inject({ method: 'GET', url: `/api/user/files?institution=${w.a1.id}`, headers: bearer(tokens.userB1!) });
    assert.equal(res.statusCode, 403);
  });
});
