import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eq } from 'drizzle-orm';
import { institutions } from '../src/db/schema.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { freePort } from '../bench/support.js';
import { sendEndlessBody, sendEndlessHeaders, type EndlessOutcome } from './support/endless-http.js';
import { waitFor } from './support/realtime.js';

/**
 * A stand-in for the providers' revoke endpoints on 127.0.0.1: /ok answers 200, /fail 500, /hang never,
 * /endless 200 with a body that does not end, /endless-headers headers that do not end (`endless` records how those ended).
 */
async function startProviderStub() {
  const received: Array<{ path: string; body: string; authorization?: string }> = [];
  const endless: EndlessOutcome[] = [];
  const server: Server = createServer((req: IncomingMessage, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      received.push({ path: req.url ?? '', body, authorization: req.headers.authorization });
      if (req.url === '/ok') res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      else if (req.url === '/fail') res.writeHead(500).end('boom');
      else if (req.url === '/endless') void sendEndlessBody(res, 200).then((o) => endless.push(o));
      else if (req.url === '/endless-headers') void sendEndlessHeaders(res).then((o) => endless.push(o));
      // /hang: never answers
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    received,
    endless,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe('cloud-services token: store encrypted, revoke best effort', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let stub: Awaited<ReturnType<typeof startProviderStub>>;
  const tok = {} as Record<'adminA' | 'adminB' | 'instAdminA1' | 'userA1', string>;

  const store = (institutionId: string, token: string | undefined, payload: unknown) =>
    t.app.inject({ method: 'PUT', url: `/api/admin/institution/${institutionId}/cloudprovider`, headers: token ? bearer(token) : {}, payload: payload as object });
  const revoke = (institutionId: string, token?: string) =>
    t.app.inject({ method: 'DELETE', url: `/api/auth/cloudprovider/institution/${institutionId}/revoke`, headers: token ? bearer(token) : {} });
  const stored = async (institutionId: string) => {
    const [row] = await t.database.db.select({ c: institutions.cloudServices }).from(institutions).where(eq(institutions.id, institutionId));
    return (row!.c as Record<string, any>).cloudprovider;
  };

  before(async () => {
    stub = await startProviderStub();
    const closedPort = await freePort();
    t = await startTestApp({
      env: {
        LOGIN_RATE_LIMIT_PER_EMAIL: '1000',
        LOGIN_RATE_LIMIT_PER_IP: '10000',
        CLOUD_REVOKE_URLS: JSON.stringify({
          okdrive: `${stub.base}/ok`,
          faildrive: `${stub.base}/fail`,
          hangdrive: `${stub.base}/hang`,
          endlessdrive: `${stub.base}/endless`,
          headersdrive: `${stub.base}/endless-headers`,
          deaddrive: `http://127.0.0.1:${closedPort}/revoke`,
        }),
      },
    });
    w = await makeWorld(t.database);
    for (const [name, user] of Object.entries({ adminA: w.accountAdminA, adminB: w.accountAdminB, instAdminA1: w.adminA1, userA1: w.userA1 })) {
      tok[name as keyof typeof tok] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(async () => {
    await t.close();
    await stub.close();
  });

  test('store: encrypted at rest, never returned; provider must be configured; institutions.edit required', async () => {
    const res = await store(w.a1.id, tok.instAdminA1, { provider: 'okdrive', accessToken: 'access-SECRET-1', refreshToken: 'refresh-SECRET-1', expiresAt: '2030-01-01T00:00:00Z' });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().data, { provider: 'okdrive', connected: true, expiresAt: '2030-01-01T00:00:00.000Z' });
    assert.ok(!res.body.includes('SECRET'));

    const row = await stored(w.a1.id);
    assert.equal(row.provider, 'okdrive');
    assert.match(row.accessToken, /^v1\./);
    assert.ok(!JSON.stringify(row).includes('SECRET'), 'tokens are sealed in the database');

    const read = await t.app.inject({ method: 'GET', url: `/api/admin/institution/${w.a1.id}`, headers: bearer(tok.adminA) });
    assert.equal(read.statusCode, 200);
    assert.deepEqual(read.json().data.cloudServices.cloudprovider, { provider: 'okdrive', connected: true, expiresAt: '2030-01-01T00:00:00.000Z' });
    assert.ok(!read.body.includes('SECRET') && !read.body.includes(row.accessToken));

    const unknown = await store(w.a1.id, tok.adminA, { provider: 'nocloud', accessToken: 'x' });
    assert.equal(unknown.statusCode, 400);
    assert.equal(unknown.json().error.details[0].field, 'provider');
    assert.equal((await store(w.a1.id, tok.adminA, { provider: 'okdrive' })).statusCode, 400);
    assert.equal((await store(w.a1.id, tok.userA1, { provider: 'okdrive', accessToken: 'x' })).statusCode, 403);
    assert.equal((await store(w.a1.id, tok.adminB, { provider: 'okdrive', accessToken: 'x' })).statusCode, 404);
    assert.equal((await store(w.a1.id, undefined, { provider: 'okdrive', accessToken: 'x' })).statusCode, 401);
    assert.match((await stored(w.a1.id)).accessToken, /^v1\./);
  });

  test('store: an expiresAt the date-time format accepts but no timestamp can hold is a 400 naming it, and stores nothing', async () => {
    const before = await stored(w.b1.id);
    for (const expiresAt of ['2026-12-31T23:59:60Z', '2026-12-31T10:00:00+01', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59-14:00']) {
      const res = await store(w.b1.id, tok.adminB, { provider: 'okdrive', accessToken: 'access-SECRET-2', expiresAt });
      assert.equal(res.statusCode, 400, `${expiresAt}: ${res.body}`);
      const body = res.json();
      assert.deepEqual(Object.keys(body).sort(), ['error', 'message', 'success'], res.body);
      assert.equal(body.success, false);
      assert.equal(typeof body.message, 'string');
      assert.equal(body.error.code, 'VALIDATION_FAILED');
      assert.deepEqual(body.error.details.map((d: any) => d.field), ['expiresAt'], res.body);
      assert.deepEqual(await stored(w.b1.id), before, 'nothing stored');
    }
    const edge = await store(w.b1.id, tok.adminB, { provider: 'okdrive', accessToken: 'access-SECRET-2', expiresAt: '9999-12-31T23:59:59+00:00' });
    assert.equal(edge.statusCode, 200, edge.body);
    assert.equal(edge.json().data.expiresAt, '9999-12-31T23:59:59.000Z');
  });

  test('revoke: refused callers change nothing; the provider receives the tokens; the field is removed', async () => {
    assert.equal((await revoke(w.a1.id)).statusCode, 401);
    assert.equal((await revoke(w.a1.id, tok.userA1)).statusCode, 403);
    assert.equal((await revoke(w.a1.id, tok.adminB)).statusCode, 404);
    assert.equal((await revoke('not-a-uuid', tok.adminA)).statusCode, 400);
    assert.ok(await stored(w.a1.id), 'refused attempts leave the token');
    assert.equal(stub.received.length, 0);

    const res = await revoke(w.a1.id, tok.instAdminA1);
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().success, true);
    assert.match(res.json().message, /removed.*revoke: done/i);
    assert.equal(await stored(w.a1.id), undefined);
    const bodies = stub.received.filter((r) => r.path === '/ok').map((r) => new URLSearchParams(r.body).get('token')).sort();
    assert.deepEqual(bodies, ['access-SECRET-1', 'refresh-SECRET-1']);
    assert.ok(stub.received.some((r) => r.authorization === 'Bearer access-SECRET-1'));

    const again = await revoke(w.a1.id, tok.instAdminA1);
    assert.equal(again.statusCode, 200);
    assert.match(again.json().message, /nothing to revoke/);
  });

  for (const [provider, expected] of [
    ['faildrive', /revoke: failed \(the provider answered 500\)/],
    ['deaddrive', /revoke: failed \(the provider could not be reached\)/],
    ['hangdrive', /revoke: failed \(the provider did not answer within 5000 ms\)/],
  ] as const) {
    test(`revoke when the provider ${provider === 'faildrive' ? 'answers 500' : provider === 'deaddrive' ? 'refuses the connection' : 'never answers'}: still 200, the token gone`, async () => {
      assert.equal((await store(w.a2.id, tok.adminA, { provider, accessToken: `tok-${provider}` })).statusCode, 200);
      const res = await revoke(w.a2.id, tok.adminA);
      assert.equal(res.statusCode, 200);
      assert.equal(res.json().success, true);
      assert.match(res.json().message, expected);
      assert.equal(await stored(w.a2.id), undefined);
    });
  }

  for (const [provider, expected] of [
    ['endlessdrive', /revoke: done \(the provider confirmed \(200\)\)/],
    ['headersdrive', /revoke: failed \(the provider could not be reached\)/],
  ] as const) {
    const what = provider === 'endlessdrive' ? 'a body that never ends: done at its status (the body is not read)' : 'headers that never end: failed at the header size limit';
    test(`revoke when the provider answers with ${what}, within the timeout; the connection closed`, async () => {
      assert.equal((await store(w.a2.id, tok.adminA, { provider, accessToken: `tok-${provider}` })).statusCode, 200);
      const seen = stub.endless.length;
      const started = Date.now();
      const res = await revoke(w.a2.id, tok.adminA);
      assert.ok(Date.now() - started < 5000, `answered within the 5 s timeout (${Date.now() - started} ms)`);
      assert.equal(res.statusCode, 200);
      assert.equal(res.json().success, true);
      assert.match(res.json().message, expected);
      assert.equal(await stored(w.a2.id), undefined);
      await waitFor(() => stub.endless.length > seen, 'the endless answer to end');
      assert.equal(stub.endless.at(-1)!.hungUp, true, 'the server closed the connection');
    });
  }
});
