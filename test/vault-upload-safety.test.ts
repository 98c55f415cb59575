import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { pngBytes, plainDocx } from './support/hostile.js';
import { makePdf, uploadFile, uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * Issue 7 row 11: file names normalised (NFC, no control or bidi characters), content sniffed from the
 * bytes (PNG named .txt is refused, not indexed as text), and a personal quota per user.
 */

function storedFiles(dataDir: string): number {
  const dir = join(dataDir, 'files');
  if (!existsSync(dir)) return 0;
  return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).length;
}

describe('upload safety: names, content sniffing', () => {
  let t: TestApp;
  let token: string;
  before(async () => {
    t = await startTestApp({ env: { INGEST_WORKERS: '1' } });
    const w = await makeWorld(t.database);
    token = (await login(t.app, w.userA1.email)).accessToken;
  });
  after(() => t.close());

  test('names: NFC; controls and bidi overrides/isolates become "_"; other invisible characters go; the extension that counts is the visible one', async () => {
    const cases: Array<[string, string]> = [
      ['report\u202egpj.txt', 'report_gpj.txt'], // shown as "reporttxt.jpg" before
      ['a\u2066b\u2069c.md', 'a_b_c.md'],
      ['Cafe\u0301 notes.txt', 'Caf\u00e9 notes.txt'], // decomposed é → one code point
      ['bell\u0007and\u0085nel.txt', 'bell_and_nel.txt'],
      ['zero\u200bwidth\u200e mark\ufeff.txt', 'zerowidth mark.txt'],
      ['  many   spaces .txt ', 'many spaces .txt'],
      ['C:\\Users\\me\\secret.txt', 'secret.txt'],
    ];
    for (const [sent, stored] of cases) {
      const file = await uploadOk(t.app, token, { name: sent, type: 'text/plain', content: `Some text for ${stored}.` }, { scope: 'personal' });
      assert.equal(file.originalname, stored, JSON.stringify(sent));
      assert.equal(file.originalname, file.originalname.normalize('NFC'));
      assert.equal(file.file_title, stored);
    }
    // the right-to-left override hid an executable: after marking, its real extension is refused
    const peBytes = Buffer.concat([Buffer.from('MZ'), Buffer.alloc(200), Buffer.from('This program cannot be run in DOS mode')]);
    const exe = await uploadFile(t.app, token, { name: 'invoice\u202etxt.exe', type: 'application/octet-stream', content: peBytes }, { scope: 'personal' });
    assert.equal(exe.statusCode, 400);
    const message = 'Unsupported file type "invoice_txt.exe" (application/octet-stream). Supported types: txt, md, csv, json, html, pdf, docx';
    assert.deepEqual(exe.json(), { success: false, message, error: { code: 'VALIDATION_FAILED', details: [{ field: 'file', message }] } });
    // claimed to be text/plain, the type falls back to the media type: then the bytes decide (an executable is binary)
    const claimed = await uploadFile(t.app, token, { name: 'invoice\u202etxt.exe', type: 'text/plain', content: peBytes }, { scope: 'personal' });
    assert.equal(claimed.statusCode, 415);
    assert.equal(claimed.json().message, 'The file is named as txt text but its content is binary data');
  });

  test('a name over 255 characters keeps its last 255 code points: the cut never falls inside a surrogate pair (no U+FFFD)', async () => {
    // 10 + 200 emoji (two UTF-16 units each) + ".txt": 214 code points, 414 UTF-16 units
    const sent = 'a'.repeat(10) + '\u{1F600}'.repeat(200) + '.txt';
    const file = await uploadOk(t.app, token, { name: sent, type: 'text/plain', content: 'A note about harbours.' }, { scope: 'personal' });
    const expected = '\u{1F600}'.repeat(200) + '.txt';
    assert.equal(file.originalname.includes('\uFFFD'), false, `the stored name holds U+FFFD: ${JSON.stringify(file.originalname.slice(0, 4))}`);
    assert.equal(file.originalname, 'a'.repeat(10) + expected, 'under 255 code points: the whole name is kept');
    // 300 ASCII letters then the emoji: the last 255 code points are 51 letters, the 200 emoji and ".txt"
    const longer = 'b'.repeat(300) + '\u{1F600}'.repeat(200) + '.txt';
    const cut = await uploadOk(t.app, token, { name: longer, type: 'text/plain', content: 'A note about pilots.' }, { scope: 'personal' });
    assert.equal(cut.originalname, 'b'.repeat(51) + expected, `cut to the last 255 code points, got ${JSON.stringify(cut.originalname.slice(0, 8))}…`);
    assert.equal(Array.from(cut.originalname).length, 255, 'at most 255 code points');
    // only emoji before the extension: a cut by UTF-16 units (255 - 4 = 251 units) would keep half an emoji
    const odd = 'c'.repeat(10) + '\u{1F600}'.repeat(300) + '.txt';
    const oddCut = await uploadOk(t.app, token, { name: odd, type: 'text/plain', content: 'A note about tides.' }, { scope: 'personal' });
    assert.equal(oddCut.originalname, '\u{1F600}'.repeat(251) + '.txt', `the last 251 emoji and the extension, got ${JSON.stringify(oddCut.originalname.slice(0, 4))}…`);
    assert.equal(oddCut.file_title, oddCut.originalname, 'the default title is the stored name');
  });

  test('content sniffing: PNG bytes named .txt, a PDF named .docx, text named .pdf are 415 and nothing is stored', async () => {
    const before = storedFiles(t.dataDir);
    const cases: Array<[string, Buffer, string]> = [
      ['photo.txt', pngBytes(), 'The file is named as txt text but its content is a PNG image'],
      ['notes.md', Buffer.concat([Buffer.from([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0]), Buffer.alloc(100)]), 'The file is named as md text but its content is an ELF executable'],
      ['report.docx', await makePdf(['x']), 'The file is named as a DOCX but its content is a PDF document'],
      ['paper.pdf', Buffer.from('plain words, no PDF here'), 'The file is named as a PDF but its content is not a PDF'],
      ['data.csv', Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 131 + 7) & 0xff)), 'The file is named as csv text but its content is binary data'],
    ];
    for (const [name, content, message] of cases) {
      const res = await uploadFile(t.app, token, { name, content, type: 'text/plain' }, { scope: 'personal' });
      assert.equal(res.statusCode, 415, `${name}: ${res.body}`);
      assert.deepEqual(res.json(), { success: false, message, error: { code: 'UNSUPPORTED_MEDIA_TYPE', details: [{ field: 'file', message }] } });
    }
    assert.equal(storedFiles(t.dataDir), before, 'refused bytes are not kept');
    const list = await t.app.inject({ method: 'GET', url: '/api/user/files?scope=personal&fileNameSearch=photo', headers: bearer(token) });
    assert.equal(list.json().data.length, 0);

    // files whose bytes agree are accepted and indexed
    const docx = await uploadOk(t.app, token, { name: 'real.docx', content: plainDocx('A real document about tides.') }, { scope: 'personal' });
    assert.equal((await waitForIngestion(t.app, token, docx._id)).status, 'active');
    const utf16 = await uploadOk(t.app, token, { name: 'wide.txt', content: Buffer.from('\ufeffUTF-16 text about tides.', 'utf16le') }, { scope: 'personal' });
    assert.equal((await waitForIngestion(t.app, token, utf16._id)).status, 'active');
  });
});

describe('upload safety: personal quota (PERSONAL_MAX_FILES, PERSONAL_MAX_BYTES)', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  before(async () => {
    t = await startTestApp({ env: { INGEST_WORKERS: '0', PERSONAL_MAX_FILES: '3', PERSONAL_MAX_BYTES: '100' } });
    w = await makeWorld(t.database);
  });
  after(() => t.close());

  test('files: the 4th personal file is 403 with the quota in details; instance files do not count; a deleted file frees its place', async () => {
    const token = (await login(t.app, w.userA1.email)).accessToken;
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await uploadOk(t.app, token, { name: `f${i}.txt`, type: 'text/plain', content: `file ${i}` }, { scope: 'personal' }))._id);
    const before = storedFiles(t.dataDir);
    const refused = await uploadFile(t.app, token, { name: 'f3.txt', type: 'text/plain', content: 'one too many' }, { scope: 'personal' });
    assert.equal(refused.statusCode, 403, refused.body);
    const message = 'Your personal vault holds 3 files, its limit (PERSONAL_MAX_FILES) is 3: delete files to upload more';
    assert.deepEqual(refused.json(), {
      success: false,
      message,
      error: { code: 'FORBIDDEN', details: [{ field: 'file', message, reason: 'personal_quota', quota: 'files', used: 3, limit: 3 }] },
    });
    // the same with the file before the fields: stored first, then refused and removed
    const late = await uploadFile(t.app, token, { name: 'late.txt', type: 'text/plain', content: 'late fields' }, { scope: 'personal' }, { fileFirst: true });
    assert.equal(late.statusCode, 403);
    assert.equal(storedFiles(t.dataDir), before);
    // another user has a quota of their own; instance files are not personal
    const other = (await login(t.app, w.userA2.email)).accessToken;
    await uploadOk(t.app, other, { name: 'o.txt', type: 'text/plain', content: 'other user' }, { scope: 'personal' });
    await uploadOk(t.app, token, { name: 'team.txt', type: 'text/plain', content: 'instance file' }, { scope: 'instance' });
    // deleting frees a place
    assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/user/files/${ids[0]}`, headers: bearer(token) })).statusCode, 200);
    await uploadOk(t.app, token, { name: 'f4.txt', type: 'text/plain', content: 'fits again' }, { scope: 'personal' });
  });

  test('bytes: a file that would pass PERSONAL_MAX_BYTES is 403 and its bytes are removed', async () => {
    const token = (await login(t.app, w.adminA1.email)).accessToken;
    await uploadOk(t.app, token, { name: 'sixty.txt', type: 'text/plain', content: 'x'.repeat(60) }, { scope: 'personal' });
    const before = storedFiles(t.dataDir);
    const refused = await uploadFile(t.app, token, { name: 'more.txt', type: 'text/plain', content: 'y'.repeat(41) }, { scope: 'personal' });
    assert.equal(refused.statusCode, 403, refused.body);
    assert.equal(refused.json().error.details[0].quota, 'bytes');
    assert.equal(refused.json().error.details[0].used, 60);
    assert.equal(refused.json().error.details[0].limit, 100);
    assert.match(refused.json().message, /^Your personal vault holds 60 bytes; with this file it would exceed its limit \(PERSONAL_MAX_BYTES\) of 100 bytes/);
    assert.equal(storedFiles(t.dataDir), before);
    // exactly up to the limit is allowed
    await uploadOk(t.app, token, { name: 'forty.txt', type: 'text/plain', content: 'z'.repeat(40) }, { scope: 'personal' });
  });
});
