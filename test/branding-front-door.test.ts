import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { openDatabase } from '../src/db/client.js';
import { institutions } from '../src/db/schema.js';
import { BRANDING_PATH } from '../src/modules/branding/branding.front-door.js';
import { bearer, login, makeAccount, makeInstitution, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { listenLocally, waitFor } from './support/realtime.js';
import { preparedDataDir } from './support/server-process.js';

/**
 * POST /api/agent/branding's cache hits are answered in front of Fastify (branding.front-door.ts). Every answer
 * the door gives must be the one the route gives for the same request: each case is sent over HTTP (through the
 * door) and by inject (straight to Fastify, which the door never sees), and the two answers are compared; the
 * door's count tells which requests it answered itself.
 */

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** What two answers to one request may differ in: the time, the request id (one per request), the connection's. */
const PER_ANSWER = new Set(['date', 'x-request-id', 'connection', 'keep-alive', 'transfer-encoding']);
const comparable = (a: Answer) => ({ status: a.status, body: a.body, headers: Object.fromEntries(Object.entries(a.headers).filter(([k]) => !PER_ANSWER.has(k)).sort()) });

describe('the branding front door', () => {
  let t: TestApp;
  let base: URL;
  let publicId = '';
  let w: Awaited<ReturnType<typeof makeWorld>>;

  /** One request over HTTP, with exactly these headers (no client adds any) and the body in the given chunks. */
  const overHttp = (headers: Record<string, string>, chunks: string[], method = 'POST', path = BRANDING_PATH): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const req = httpRequest({ host: base.hostname, port: base.port, method, path, headers: { host: base.host, ...headers } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers as Record<string, string>, body }));
      });
      req.on('error', reject);
      const [first, ...rest] = chunks;
      if (first === undefined) return void req.end();
      req.write(first);
      if (rest.length === 0) return void req.end();
      // the rest after a pause, so that the server sees the body in more than one chunk
      setTimeout(() => {
        for (const c of rest) req.write(c);
        req.end();
      }, 30);
    });

  const injected = async (headers: Record<string, string>, body: string, method = 'POST', path = BRANDING_PATH): Promise<Answer> => {
    const res = await t.app.inject({ method: method as 'POST', url: path, headers, payload: body });
    return { status: res.statusCode, headers: Object.fromEntries(Object.entries(res.headers).map(([k, v]) => [k, String(v)])), body: res.body };
  };

  const json = (value: unknown) => JSON.stringify(value);
  const asJson = (body: string) => ({ 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) });

  /** Sends the request both ways; returns the HTTP answer and whether the door answered it. */
  async function both(headers: Record<string, string>, body: string, options: { chunks?: string[]; method?: string; path?: string } = {}) {
    const before = t.app.brandingFrontDoor.answered;
    const http = await overHttp(headers, options.chunks ?? [body], options.method, options.path);
    const byDoor = t.app.brandingFrontDoor.answered - before;
    const { 'content-length': _length, ...rest } = headers;
    const direct = await injected(rest, body, options.method, options.path);
    assert.deepEqual(comparable(http), comparable(direct), `the same answer over HTTP (door ${byDoor}) and from the route`);
    return { http, byDoor };
  }

  before(async () => {
    t = await startTestApp();
    w = await makeWorld(t.database);
    await t.database.db.update(institutions).set({ picture: 'https://cdn.example/newton.png', about: 'Physics tutor' }).where(eq(institutions.id, w.a1.id));
    publicId = w.a1.publicId;
    base = new URL(await listenLocally(t.app));
  });
  after(async () => {
    await t.close();
  });

  test('a cached branding is answered by the door with the route\'s status, headers and bytes; 304 on a matching If-None-Match', async () => {
    const body = json({ publicId });
    // not cached yet: the route answers (and caches it)
    const first = await both(asJson(body), body);
    assert.equal(first.byDoor, 0);
    assert.equal(first.http.status, 200);
    assert.deepEqual(JSON.parse(first.http.body), { picture: 'https://cdn.example/newton.png', picture_animated: '', picture_bg: '', picture_dark_bg: '', voice_agent_id: '', about: 'Physics tutor', ainame: 'Newton', status: 'active' });

    const hit = await both(asJson(body), body);
    assert.equal(hit.byDoor, 1);
    assert.equal(hit.http.status, 200);
    for (const name of ['etag', 'cache-control', 'x-content-type-options', 'x-frame-options', 'referrer-policy', 'x-request-id']) assert.ok(hit.http.headers[name], `${name} is sent`);
    const etag = hit.http.headers.etag!;

    const unchanged = await both({ ...asJson(body), 'if-none-match': etag }, body);
    assert.deepEqual([unchanged.byDoor, unchanged.http.status, unchanged.http.body], [1, 304, '']);
    const changed = await both({ ...asJson(body), 'if-none-match': '"another"' }, body);
    assert.deepEqual([changed.byDoor, changed.http.status], [1, 200]);
    // an upper-case publicId, charset and whitespace: the same branding
    const upper = json({ publicId: publicId.toUpperCase() }).replace(':', ': ');
    assert.equal((await both({ 'content-type': 'application/json; charset=utf-8', 'content-length': String(upper.length) }, upper)).byDoor, 1);
    // the caller's request id is echoed, as Fastify echoes it
    const named = await overHttp({ ...asJson(body), 'x-request-id': 'trace-42' }, [body]);
    assert.equal(named.headers['x-request-id'], 'trace-42');
  });

  test('every other request goes on to the route, which reads its body as sent', async () => {
    const body = json({ publicId });
    await both(asJson(body), body); // cached
    const cases: Array<[string, Record<string, string>, string, { chunks?: string[]; method?: string }?]> = [
      ['unknown publicId (404)', asJson(json({ publicId: '3f1c2b4a-5d6e-4f70-8a9b-0c1d2e3f4a5b' })), json({ publicId: '3f1c2b4a-5d6e-4f70-8a9b-0c1d2e3f4a5b' })],
      ['malformed publicId (400)', asJson(json({ publicId: 'not-a-uuid' })), json({ publicId: 'not-a-uuid' })],
      ['not JSON (400)', asJson('{"publicId":'), '{"publicId":'],
      ['an array (400)', asJson(json([publicId])), json([publicId])],
      ['__proto__ (400)', asJson(`{"publicId":"${publicId}","__proto__":{"x":1}}`), `{"publicId":"${publicId}","__proto__":{"x":1}}`],
      ['text/plain (415)', { 'content-type': 'text/plain', 'content-length': String(body.length) }, body],
      ['an Origin (CORS is the route\'s)', { ...asJson(body), origin: 'https://app.example.com' }, body],
      ['the body in two chunks', asJson(body), body, { chunks: [body.slice(0, 10), body.slice(10)] }],
      ['a long body', asJson(json({ publicId, padding: 'x'.repeat(2000) })), json({ publicId, padding: 'x'.repeat(2000) })],
      ['chunked transfer encoding', { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, body],
    ];
    for (const [name, headers, payload, options] of cases) {
      const { http, byDoor } = await both(headers, payload, options);
      assert.equal(byDoor, 0, `${name}: answered by the route`);
      if (name.startsWith('the body in two') || name.startsWith('a long') || name.startsWith('chunked') || name.startsWith('an Origin')) assert.equal(http.status, 200, `${name}: ${http.body}`);
      else assert.ok(http.status >= 400, `${name}: ${http.status}`);
    }
    // another path or method is never the door's
    const other = await overHttp(asJson(body), [body], 'POST', '/api/auth/getInstitutionsForContextid');
    assert.equal(other.status, 400);
    assert.equal((await overHttp({}, [], 'GET')).status, 404);
  });

  test('the door\'s answers are counted in /metrics as the route\'s', async () => {
    const body = json({ publicId });
    await both(asJson(body), body);
    const count = async () => {
      const metrics = await t.app.inject({ method: 'GET', url: '/metrics' });
      const line = metrics.body.split('\n').find((l) => l.startsWith('http_requests_total{') && l.includes('route="/api/agent/branding"') && l.includes('status="200"'));
      return Number(line?.split(' ').pop() ?? 0);
    };
    const before = await count();
    const doorBefore = t.app.brandingFrontDoor.answered;
    for (let i = 0; i < 5; i++) await overHttp(asJson(body), [body]);
    assert.equal(t.app.brandingFrontDoor.answered - doorBefore, 5);
    assert.equal((await count()) - before, 5);
  });

  test('a branding changed through the admin route is the new one at the door at once', async () => {
    const body = json({ publicId });
    await both(asJson(body), body);
    const old = await overHttp(asJson(body), [body]);
    const root = (await login(t.app, w.superadmin.email)).accessToken;
    const patched = await t.app.inject({ method: 'PATCH', url: `/api/admin/institution/${w.a1.id}`, headers: bearer(root), payload: { about: 'Quantum tutor' } });
    assert.equal(patched.statusCode, 200, patched.body);
    const first = await both(asJson(body), body);
    assert.equal(first.byDoor, 0, 'the changed branding is read again by the route');
    assert.equal(JSON.parse(first.http.body).about, 'Quantum tutor');
    const again = await both(asJson(body), body);
    assert.equal(again.byDoor, 1);
    assert.equal(JSON.parse(again.http.body).about, 'Quantum tutor');
    assert.notEqual(again.http.headers.etag, old.headers.etag);
  });
});

test('with each request logged (LOG_LEVEL info), the door writes the lines Fastify writes', async () => {
  // a server process on its own (its log is its standard output), with one institution to look up
  const dataDir = await preparedDataDir('twin-door-log-');
  const database = await openDatabase({ pgliteDataDir: join(dataDir, 'pgdata') });
  const account = await makeAccount(database);
  const institution = await makeInstitution(database, account.id, { ainame: 'Logged' });
  await database.close();
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'serve'], {
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'development', DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', INGEST_WORKERS: '0', FILE_SWEEP_INTERVAL_HOURS: '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Array<Record<string, unknown>> = [];
  let pending = '';
  child.stdout.on('data', (d: Buffer) => {
    pending += d.toString();
    const parts = pending.split('\n');
    pending = parts.pop() ?? '';
    for (const part of parts) if (part.startsWith('{')) lines.push(JSON.parse(part) as Record<string, unknown>);
  });
  try {
    await waitFor(() => lines.some((l) => l.msg === 'server ready'), 'the server to start', 60_000);
    const listening = lines.find((l) => typeof l.msg === 'string' && /^Server listening at http:\/\/127\.0\.0\.1:\d+$/.test(l.msg));
    assert.ok(listening, 'the server said where it listens');
    const url = `${String(listening.msg).replace('Server listening at ', '')}${BRANDING_PATH}`;
    const ask = () => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ publicId: institution.publicId }) });
    // the first is the route's (a miss: loaded, then cached), the second the door's
    for (let i = 0; i < 2; i++) assert.equal((await ask()).status, 200);
    await waitFor(() => lines.filter((l) => l.msg === 'request completed').length >= 2, 'both requests logged');
    const incoming = lines.filter((l) => l.msg === 'incoming request' && (l.req as { url?: string }).url === BRANDING_PATH);
    const completed = lines.filter((l) => l.msg === 'request completed');
    assert.equal(incoming.length, 2);
    const shape = (l: Record<string, unknown>) => {
      const { time: _time, reqId, responseTime, ...rest } = l;
      const req = rest.req as Record<string, unknown> | undefined;
      return { ...rest, ...(req ? { req: { ...req, remotePort: typeof req.remotePort } } : {}), reqId: typeof reqId, responseTime: typeof responseTime };
    };
    assert.deepEqual(shape(incoming[1]!), shape(incoming[0]!));
    assert.deepEqual(shape(completed.at(-1)!), shape(completed.at(-2)!));
    assert.deepEqual((completed.at(-1)!.res as object), { statusCode: 200 });
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    rmSync(dataDir, { recursive: true, force: true });
  }
});
