import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { freePort, startServer, stopProcess } from '../bench/support.js';
import { buildZip, deeplyNestedHtml, deflated, docxBomb, DOCUMENT_HEAD, DOCUMENT_TAIL, plainDocx, xmlBombDocx } from './support/hostile.js';
import { preparedDataDir } from './support/server-process.js';
import { makePdf } from './support/uploads.js';

/**
 * Issue 7 row 1: hostile files uploaded over HTTP to the real server, in its own process (`src/cli.ts
 * serve`, as `npm start` runs it). Each must end in `error` with a readable message while the process
 * stays up, keeps answering other requests, and keeps its heap small. Before the fix, the 250 MB DOCX
 * bomb alone drove the API process to a 4.8 GB heap and killed it.
 */

const SECRETS = { JWT_SECRET: 'hostile-secret-hostile-secret-hostile-0123', ENCRYPTION_KEY: 'hostile-encryption-key-hostile-encryption-01' };
const MB = 1024 * 1024;

interface Server {
  child: ChildProcess;
  base: string;
  dataDir: string;
  token: string;
}

async function startApi(env: Record<string, string>): Promise<Server> {
  const dataDir = await preparedDataDir('twin-hostile-');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const child = await startServer(
    ['src/cli.ts', 'serve'],
    {
      ...SECRETS,
      NODE_ENV: 'test',
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      BOOTSTRAP_ADMIN_EMAIL: 'hostile@example.com',
      BOOTSTRAP_ADMIN_PASSWORD: 'hostile-password-1',
      UPLOAD_RATE_LIMIT_PER_MINUTE: '1000',
      ...env,
    },
    `${base}/readyz`,
  );
  const login = await fetch(`${base}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'hostile@example.com', password: 'hostile-password-1' }),
  });
  assert.equal(login.status, 200);
  const token = ((await login.json()) as { accessToken: string }).accessToken;
  return { child, base, dataDir, token };
}

async function stopApi(s: Server | undefined): Promise<void> {
  if (!s) return;
  await stopProcess(s.child);
  rmSync(s.dataDir, { recursive: true, force: true });
}

async function upload(s: Server, name: string, bytes: Buffer | string, type = 'application/octet-stream'): Promise<Response> {
  const form = new FormData();
  form.append('scope', 'personal');
  form.append('file', new Blob([typeof bytes === 'string' ? bytes : new Uint8Array(bytes)], { type }), name);
  return fetch(`${s.base}/api/user/files`, { method: 'POST', headers: { authorization: `Bearer ${s.token}` }, body: form });
}

/** A DOCX whose end record counts 3 entries, followed by a 4th, uncounted word/document.xml. */
function uncountedShadowDocx(): Buffer {
  const zip = buildZip([
    deflated('[Content_Types].xml', '<Types/>'),
    deflated('_rels/.rels', '<Relationships/>'),
    deflated('word/document.xml', DOCUMENT_HEAD + 'checked text' + DOCUMENT_TAIL),
    deflated('word/document.xml', DOCUMENT_HEAD + 'shadow text never checked' + DOCUMENT_TAIL),
  ]);
  const eocd = zip.length - 22;
  zip.writeUInt16LE(3, eocd + 8);
  zip.writeUInt16LE(3, eocd + 10);
  return zip;
}

async function uploadAndWait(s: Server, name: string, bytes: Buffer | string, timeoutMs = 60_000): Promise<Record<string, any>> {
  const res = await upload(s, name, bytes);
  assert.equal(res.status, 201, await res.clone().text());
  const id = ((await res.json()) as { data: { _id: string } }).data._id;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await fetch(`${s.base}/api/user/files/${id}`, { headers: { authorization: `Bearer ${s.token}` } });
    assert.equal(r.status, 200);
    const data = ((await r.json()) as { data: Record<string, any> }).data;
    if (data.status !== 'processing') return data;
    if (Date.now() > deadline) throw new Error(`${name} still processing after ${timeoutMs} ms (stage ${data.stage})`);
    await new Promise((r2) => setTimeout(r2, 100));
  }
}

/** Other clients, meanwhile: /healthz and /api/user/me every 25 ms; every answer must be a 200. */
function otherClients(s: Server) {
  const statuses: number[] = [];
  let slowest = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      for (const [url, headers] of [
        [`${s.base}/healthz`, {}],
        [`${s.base}/api/user/me`, { authorization: `Bearer ${s.token}` }],
      ] as const) {
        const t = performance.now();
        const res = await fetch(url, { headers }).catch(() => null);
        slowest = Math.max(slowest, performance.now() - t);
        statuses.push(res?.status ?? 0);
        await res?.arrayBuffer();
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { statuses, slowest };
    },
  };
}

async function heapUsedBytes(s: Server): Promise<number> {
  const text = await (await fetch(`${s.base}/metrics`)).text();
  const m = /^nodejs_heap_size_used_bytes (\d+(?:\.\d+)?(?:e\+\d+)?)$/m.exec(text);
  assert.ok(m, 'nodejs_heap_size_used_bytes in /metrics');
  return Number(m[1]);
}

describe('hostile uploads against the server process (INGEST_WORKER_HEAP_MB=128)', () => {
  let s: Server | undefined;
  before(async () => {
    s = await startApi({ INGEST_WORKER_HEAP_MB: '128' });
  });
  after(() => stopApi(s));

  test('zip bombs, an XML entity bomb, deep HTML, corrupt and truncated PDFs end in error with a readable message; other requests keep being answered', async () => {
    const api = s!;
    const pdf = await makePdf(['A page of ordinary text.', 'Another page.']);
    const cases: Array<[string, Buffer | string, RegExp]> = [
      // 764 KB → 250 MB in the probe; here 250 KB → 250 MB with sizes declared honestly: refused from the central directory
      ['bomb.docx', await docxBomb(250 * MB), /^Could not read DOCX: The document would inflate to more than 100 MB \(declared sizes\); it was not opened$/],
      // the same bomb declaring 1,000 bytes: stopped while inflating, at the ratio cap
      ['lying.docx', await docxBomb(250 * MB, { declaredSize: 1000 }), /^Could not read DOCX: "word\/document\.xml" inflates more than 100 times its compressed size \(a zip bomb\?\); the document was not opened$/],
      // like the probe's 100 MB variant: under the total, but at ~1000:1
      ['ratio.docx', await docxBomb(80 * MB), /^Could not read DOCX: "word\/document\.xml" inflates more than 100 times its compressed size/],
      ['laughs.docx', xmlBombDocx(), /^Could not read DOCX: "word\/document\.xml" declares a DTD or entities, which documents never need \(entity expansion is refused\)$/],
      ['nested.html', deeplyNestedHtml(200_000), /^The HTML is nested more than 1024 elements deep; it was not read$/],
      // the same depth written as "<div/>" (HTML ignores the slash) or with "<" in an attribute value
      ['nested-selfclosing.html', `<html><body><p>Intro.</p>${'<div/>'.repeat(200_000)}buried</body></html>`, /^The HTML is nested more than 1024 elements deep; it was not read$/],
      ['nested-attr.html', `<html><body><p>Intro.</p>${'<div title="<">'.repeat(200_000)}buried</body></html>`, /^The HTML is nested more than 1024 elements deep; it was not read$/],
      ['corrupt.pdf', Buffer.concat([Buffer.from('%PDF-1.7\n'), Buffer.alloc(50_000, 0x37)]), /^Could not read PDF: Invalid PDF structure\.$/],
      ['truncated.pdf', pdf.subarray(0, Math.floor(pdf.length / 2)), /^Could not read PDF: Invalid PDF structure\.$/],
      // a 4th word/document.xml past the end record's count of 3: JSZip (mammoth) would read it, unchecked
      ['shadow.docx', uncountedShadowDocx(), /^Could not read DOCX: The container holds "word\/document\.xml" twice: a corrupt or crafted file$/],
      ['no-zip.docx', Buffer.concat([Buffer.from('PK\u0003\u0004'), Buffer.alloc(2000, 1)]), /^Could not read DOCX: The file is not a valid zip container \(no central directory: truncated or corrupt\)$/],
    ];
    const others = otherClients(api);
    const heaps: number[] = [];
    try {
      for (const [name, bytes, message] of cases) {
        const file = await uploadAndWait(api, name, bytes);
        assert.equal(file.status, 'error', `${name}: ${JSON.stringify(file)}`);
        assert.match(file.error_message, message, name);
        assert.equal(file.chunkCount, 0, name);
        heaps.push(await heapUsedBytes(api));
      }
      // ingestion still works for an ordinary file afterwards
      const ok = await uploadAndWait(api, 'fine.docx', plainDocx('An ordinary document about photosynthesis.'));
      assert.equal(ok.status, 'active', JSON.stringify(ok));
      assert.equal(ok.chunkCount, 1);
    } finally {
      const { statuses, slowest } = await others.stop();
      assert.ok(statuses.length >= 10, `other clients made ${statuses.length} requests`);
      assert.deepEqual([...new Set(statuses)], [200], 'every /healthz and /me answer was 200');
      console.log(`# other requests: ${statuses.length}, slowest ${Math.round(slowest)} ms; API heap after each file (MB): ${heaps.map((h) => Math.round(h / MB)).join(', ')}`);
    }
    assert.equal(api.child.exitCode, null, 'the API process is still running');
    assert.equal(api.child.signalCode, null);
    // the API process's own heap never held an inflated document (250 MB in the probe)
    for (const h of heaps) assert.ok(h < 200 * MB, `API heap ${Math.round(h / MB)} MB`);
  });

  test('a file that passes the parsers but needs more than INGEST_WORKER_HEAP_MB kills the sandbox process, not the API', async () => {
    const api = s!;
    // 2 million tiny objects (~16 MB): parsed, then one line per leaf, far beyond a 128 MB heap
    const json = `[${'{"a":1},'.repeat(2_000_000)}{"a":1}]`;
    const others = otherClients(api);
    try {
      const big = await uploadAndWait(api, 'objects.json', json);
      assert.equal(big.status, 'error', JSON.stringify(big));
      assert.equal(big.error_message, 'Text extraction needed more than 128 MB of memory (INGEST_WORKER_HEAP_MB) and was stopped; the file was not indexed');
      // a fresh sandbox serves the next file
      const next = await uploadAndWait(api, 'after.txt', 'A plain text file ingested after the sandbox ran out of memory.');
      assert.equal(next.status, 'active', JSON.stringify(next));
    } finally {
      const { statuses } = await others.stop();
      assert.deepEqual([...new Set(statuses)], [200]);
    }
    assert.equal(api.child.exitCode, null);
    assert.ok((await heapUsedBytes(api)) < 200 * MB);
  });
});
