import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eq } from 'drizzle-orm';
import { ssoProviders } from '../src/db/schema.js';
import { classifyAddress } from '../src/modules/sso/sso.net.js';
import { newId } from '../src/shared/ids.js';
import { freePort } from '../bench/support.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { sendEndlessBody, sendEndlessHeaders, type EndlessOutcome } from './support/endless-http.js';
import { waitFor } from './support/realtime.js';

/**
 * A stand-in for an identity provider on 127.0.0.1: /token answers like a live token endpoint refusing
 * an unknown client (401 invalid_client), /missing 404, /hang never, /to-metadata redirects to the
 * cloud metadata address, /to-token redirects (307) to /token, /to-elsewhere redirects (307) to `elsewhere`
 * (another origin), /endless answers 401 with a body that does not end, /endless-headers sends headers that do
 * not end (`endless` records how those ended). Counts connections.
 */
async function startIdpStub(elsewhere = '') {
  const requests: Array<{ path: string; method: string; body: string; authorization?: string }> = [];
  const endless: EndlessOutcome[] = [];
  let connections = 0;
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      requests.push({ path: req.url ?? '', method: req.method ?? '', body, authorization: req.headers.authorization });
      if (req.url === '/token') res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"invalid_client"}');
      else if (req.url === '/missing') res.writeHead(404).end();
      else if (req.url === '/to-metadata') res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/' }).end();
      else if (req.url === '/to-token') res.writeHead(307, { location: '/token' }).end();
      else if (req.url === '/to-elsewhere') res.writeHead(307, { location: elsewhere }).end();
      else if (req.url === '/endless') void sendEndlessBody(res, 401).then((o) => endless.push(o));
      else if (req.url === '/endless-headers') void sendEndlessHeaders(res).then((o) => endless.push(o));
      // /hang: never answers
    });
  });
  server.on('connection', () => connections++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    requests,
    endless,
    connections: () => connections,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const expectError = (res: { statusCode: number; json(): any }, status: number, code: string) => {
  assert.equal(res.statusCode, status, res.statusCode !== status ? JSON.stringify(res.json()) : '');
  assert.equal(res.json().error.code, code);
  return res.json();
};

describe('SSO providers with SSO_TEST_ALLOW_PRIVATE=true (providers on loopback)', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let idp: Awaited<ReturnType<typeof startIdpStub>>;
  const tok = {} as Record<'root' | 'adminA' | 'adminB' | 'instAdminA1' | 'userA1', string>;

  const call = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, token?: string, payload?: unknown) =>
    t.app.inject({ method, url, headers: token ? bearer(token) : {}, ...(payload !== undefined ? { payload: payload as object } : {}) });
  const makeProvider = async (tokenEndpoint: string, extra: Record<string, unknown> = {}) => {
    const res = await call('POST', '/api/admin/ssoProvider', tok.adminA, { name: 'Campus IdP', type: 'oidc', issuer: idp.base, tokenEndpoint, clientId: 'client-1', clientSecret: 'S3CRET-value', ...extra });
    assert.equal(res.statusCode, 201, res.body);
    return res.json().data;
  };
  const testProvider = async (id: string, token = tok.adminA) => {
    const res = await call('POST', `/api/admin/ssoProvider/test/${id}`, token);
    assert.equal(res.statusCode, 200, res.body);
    return res.json();
  };

  before(async () => {
    idp = await startIdpStub();
    t = await startTestApp({ env: { SSO_TEST_ALLOW_PRIVATE: 'true', LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    for (const [name, user] of Object.entries({ root: w.superadmin, adminA: w.accountAdminA, adminB: w.accountAdminB, instAdminA1: w.adminA1, userA1: w.userA1 })) {
      tok[name as keyof typeof tok] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(async () => {
    await t.close();
    await idp.close();
  });

  test('CRUD: the client secret is stored sealed and never returned; manage vs test permissions; other tenants 404', async () => {
    const p = await makeProvider(`${idp.base}/token`);
    assert.equal(p.account, w.accountA.id);
    assert.equal(p.hasClientSecret, true);
    assert.equal('clientSecret' in p, false);
    const [row] = await t.database.db.select().from(ssoProviders).where(eq(ssoProviders.id, p._id));
    assert.match(row!.clientSecretSealed!, /^v1\./);
    assert.ok(!row!.clientSecretSealed!.includes('S3CRET'));

    const list = await call('GET', '/api/admin/ssoProviders', tok.instAdminA1);
    assert.equal(list.statusCode, 200);
    assert.ok(list.json().data.some((x: any) => x._id === p._id));
    assert.ok(!list.body.includes('S3CRET'));
    assert.equal((await call('GET', '/api/admin/ssoProviders', tok.adminB)).json().data.some((x: any) => x._id === p._id), false);
    expectError(await call('GET', '/api/admin/ssoProviders', tok.userA1), 403, 'FORBIDDEN');

    expectError(await call('POST', '/api/admin/ssoProvider', tok.instAdminA1, { name: 'x', type: 'oidc', issuer: idp.base, tokenEndpoint: idp.base, clientId: 'c' }), 403, 'FORBIDDEN');
    expectError(await call('PATCH', `/api/admin/ssoProvider/${p._id}`, tok.instAdminA1, { name: 'y' }), 403, 'FORBIDDEN');
    expectError(await call('PATCH', `/api/admin/ssoProvider/${p._id}`, tok.adminB, { name: 'y' }), 404, 'NOT_FOUND');
    expectError(await call('POST', `/api/admin/ssoProvider/test/${p._id}`, tok.adminB), 404, 'NOT_FOUND');
    expectError(await call('POST', `/api/admin/ssoProvider/test/${p._id}`, tok.userA1), 403, 'FORBIDDEN');
    expectError(await call('POST', `/api/admin/ssoProvider/test/${p._id}`), 401, 'UNAUTHENTICATED');
    expectError(await call('POST', `/api/admin/ssoProvider/test/${newId()}`, tok.adminA), 404, 'NOT_FOUND');
    expectError(await call('POST', '/api/admin/ssoProvider', tok.adminA, { name: 'x', type: 'saml', issuer: idp.base, tokenEndpoint: idp.base, clientId: 'c' }), 400, 'VALIDATION_FAILED');
    expectError(await call('POST', '/api/admin/ssoProvider', tok.adminA, { name: 'x', type: 'oidc', issuer: 'not a url', tokenEndpoint: idp.base, clientId: 'c' }), 400, 'VALIDATION_FAILED');
    expectError(await call('POST', '/api/admin/ssoProvider', tok.adminA, { name: 'x', type: 'oidc', issuer: idp.base, tokenEndpoint: 'ftp://example.com/t', clientId: 'c' }), 400, 'VALIDATION_FAILED');
    expectError(await call('POST', '/api/admin/ssoProvider', tok.adminA, { account: w.accountB.id, name: 'x', type: 'oidc', issuer: idp.base, tokenEndpoint: idp.base, clientId: 'c' }), 404, 'NOT_FOUND');

    // a blank clientId, like a blank name, is refused on create and on update (it was saved as "")
    const blank = await call('POST', '/api/admin/ssoProvider', tok.adminA, { name: 'x', type: 'oidc', issuer: idp.base, tokenEndpoint: idp.base, clientId: '   ' });
    expectError(blank, 400, 'VALIDATION_FAILED');
    assert.equal(blank.json().error.details[0].field, 'clientId');
    expectError(await call('PATCH', `/api/admin/ssoProvider/${p._id}`, tok.adminA, { clientId: '  ' }), 400, 'VALIDATION_FAILED');
    assert.equal((await call('GET', `/api/admin/ssoProvider/${p._id}`, tok.adminA)).json().data.clientId, 'client-1');

    // the stored secret does not follow tokenEndpoint to another origin: the secret must come with the move
    const elsewhere = new URL(idp.base);
    elsewhere.port = String(Number(elsewhere.port) === 65535 ? 65534 : Number(elsewhere.port) + 1);
    const moved = await call('PATCH', `/api/admin/ssoProvider/${p._id}`, tok.adminA, { tokenEndpoint: `${elsewhere.origin}/token` });
    expectError(moved, 400, 'VALIDATION_FAILED');
    assert.equal(moved.json().error.details[0].field, 'clientSecret');
    assert.equal((await call('GET', `/api/admin/ssoProvider/${p._id}`, tok.adminA)).json().data.tokenEndpoint, `${idp.base}/token`);
    const samePlace = await call('PATCH', `/api/admin/ssoProvider/${p._id}`, tok.adminA, { tokenEndpoint: `${idp.base}/oauth/token` });
    assert.deepEqual([samePlace.statusCode, samePlace.json().data.hasClientSecret], [200, true], samePlace.body);
    const withSecret = await call('PATCH', `/api/admin/ssoProvider/${p._id}`, tok.adminA, { tokenEndpoint: `${elsewhere.origin}/token`, clientSecret: 'NEW-secret' });
    assert.deepEqual([withSecret.statusCode, withSecret.json().data.hasClientSecret], [200, true], withSecret.body);

    const patched = await call('PATCH', `/api/admin/ssoProvider/${p._id}`, tok.adminA, { clientSecret: null, name: 'Renamed' });
    assert.equal(patched.statusCode, 200);
    assert.deepEqual([patched.json().data.name, patched.json().data.hasClientSecret], ['Renamed', false]);
    assert.equal((await call('DELETE', `/api/admin/ssoProvider/${p._id}`, tok.adminA)).statusCode, 200);
    expectError(await call('GET', `/api/admin/ssoProvider/${p._id}`, tok.adminA), 404, 'NOT_FOUND');
  });

  test('reachable: a live token endpoint answers; the request carries the client credentials', async () => {
    const p = await makeProvider(`${idp.base}/token`);
    const before = idp.requests.length;
    const res = await testProvider(p._id, tok.instAdminA1);
    assert.deepEqual(res, { success: true, reachable: true, status: 401, message: 'The token endpoint answered 401' });
    const req = idp.requests.slice(before).find((r) => r.path === '/token')!;
    assert.equal(req.method, 'POST');
    assert.equal(new URLSearchParams(req.body).get('grant_type'), 'client_credentials');
    assert.equal(req.authorization, `Basic ${Buffer.from('client-1:S3CRET-value').toString('base64')}`);

    const mark = idp.requests.length;
    const redirected = await testProvider((await makeProvider(`${idp.base}/to-token`))._id);
    assert.deepEqual([redirected.reachable, redirected.status, redirected.success], [true, 401, true]);
    // a redirect within the endpoint's origin keeps the credentials
    assert.deepEqual(
      idp.requests.slice(mark).map((r) => [r.path, r.method, r.authorization]),
      [
        ['/to-token', 'POST', req.authorization],
        ['/token', 'POST', req.authorization],
      ],
    );
  });

  test('a redirect to another origin does not carry the client secret there', async () => {
    const other = await startIdpStub();
    const from = await startIdpStub(`${other.base}/token`);
    try {
      const res = await testProvider((await makeProvider(`${from.base}/to-elsewhere`))._id);
      assert.deepEqual([res.success, res.reachable, res.status], [true, true, 401]);
      assert.equal(from.requests[0]!.authorization, `Basic ${Buffer.from('client-1:S3CRET-value').toString('base64')}`);
      assert.deepEqual(
        other.requests.map((r) => [r.path, r.method, r.authorization]),
        [['/token', 'POST', undefined]],
      );
    } finally {
      await from.close();
      await other.close();
    }
  });

  test('404: reachable, but not a token endpoint', async () => {
    const res = await testProvider((await makeProvider(`${idp.base}/missing`))._id);
    assert.deepEqual([res.success, res.reachable, res.status], [false, true, 404]);
  });

  test('refused connection: unreachable, status 0', async () => {
    const port = await freePort();
    const res = await testProvider((await makeProvider(`http://127.0.0.1:${port}/token`))._id);
    assert.deepEqual([res.success, res.reachable, res.status], [false, false, 0]);
    assert.match(res.message, /connection was refused/);
  });

  test('timeout: a provider that never answers is reported after 5 s', async () => {
    const res = await testProvider((await makeProvider(`${idp.base}/hang`))._id);
    assert.deepEqual([res.success, res.reachable, res.status], [false, false, 0]);
    assert.match(res.message, /No answer within 5 s/);
  });

  test('a token endpoint whose body never ends: its status at once (the body is not read), the connection closed', async () => {
    const seen = idp.endless.length;
    const started = Date.now();
    const res = await testProvider((await makeProvider(`${idp.base}/endless`))._id);
    assert.ok(Date.now() - started < 5000, `answered within the 5 s timeout (${Date.now() - started} ms)`);
    assert.deepEqual(res, { success: true, reachable: true, status: 401, message: 'The token endpoint answered 401' });
    await waitFor(() => idp.endless.length > seen, 'the endless answer to end');
    assert.equal(idp.endless.at(-1)!.hungUp, true, 'the server closed the connection');
  });

  test('a token endpoint whose headers never end: unreachable, status 0, well within the timeout (the header size limit), the connection closed', async () => {
    const seen = idp.endless.length;
    const started = Date.now();
    const res = await testProvider((await makeProvider(`${idp.base}/endless-headers`))._id);
    assert.ok(Date.now() - started < 5000, `answered within the 5 s timeout (${Date.now() - started} ms)`);
    assert.deepEqual([res.success, res.reachable, res.status], [false, false, 0]);
    assert.match(res.message, /^The token endpoint is unreachable: the request failed \(HPE_HEADER_OVERFLOW\)$/u);
    await waitFor(() => idp.endless.length > seen, 'the endless answer to end');
    assert.equal(idp.endless.at(-1)!.hungUp, true, 'the server closed the connection');
  });

  test('blocked: link-local and metadata addresses are refused literally, in stored records and on redirects', async () => {
    for (const endpoint of ['http://169.254.169.254/latest/meta-data/', 'http://[fe80::1]/token', 'http://[::ffff:169.254.169.254]/', 'http://[fd00:ec2::254]/', 'http://100.100.100.200/']) {
      const res = await call('POST', '/api/admin/ssoProvider', tok.adminA, { name: 'x', type: 'oauth2', issuer: idp.base, tokenEndpoint: endpoint, clientId: 'c' });
      const body = expectError(res, 400, 'VALIDATION_FAILED');
      assert.match(body.message, /link-local, metadata or reserved/, endpoint);
    }
    // a record written before the rule (or by hand) is still refused by the test itself
    const id = newId();
    await t.database.db.insert(ssoProviders).values({ id, accountId: w.accountA.id, name: 'legacy', type: 'oidc', issuer: 'http://169.254.169.254', tokenEndpoint: 'http://169.254.169.254/token', clientId: 'c' });
    const literal = await testProvider(id);
    assert.deepEqual([literal.success, literal.reachable, literal.status], [false, false, 0]);
    assert.match(literal.message, /^Refused: 169\.254\.169\.254 is a link-local/);

    const viaRedirect = await testProvider((await makeProvider(`${idp.base}/to-metadata`))._id);
    assert.deepEqual([viaRedirect.success, viaRedirect.reachable, viaRedirect.status], [false, true, 302]);
    assert.match(viaRedirect.message, /^Refused to follow a redirect: 169\.254\.169\.254 is a link-local/);
  });

  test('address rules: link-local and metadata always, private and loopback only when allowed', () => {
    for (const a of ['169.254.169.254', '169.254.1.1', 'fe80::1', '::ffff:169.254.169.254', 'fd00:ec2::254', '100.100.100.200', '0.0.0.0', '::', '224.0.0.1']) {
      assert.equal(classifyAddress(a, true).allowed, false, a);
    }
    for (const a of ['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '::1', 'fc00::1', 'fec0::1', 'feff::1', '100.64.0.1', '::ffff:127.0.0.1']) {
      assert.equal(classifyAddress(a, false).allowed, false, a);
      assert.equal(classifyAddress(a, true).allowed, true, a);
    }
    for (const a of ['8.8.8.8', '2606:4700:4700::1111', '172.32.0.1']) assert.equal(classifyAddress(a, false).allowed, true, a);
    // IPv6 forms that reach an IPv4 address through a translator or a tunnel count as that address:
    // NAT64 (64:ff9b::/96; the local-use 64:ff9b:1::/48 with its /96 and /48 layouts), 6to4 (2002::/16), Teredo (client
    // address inverted), IPv4-compatible (::/96), IPv4-translated (::ffff:0:0/96)
    for (const a of ['64:ff9b::a9fe:a9fe', '64:ff9b::169.254.169.254', '64:ff9b:1::a9fe:a9fe', '64:ff9b:1:a9fe:a9:fe00::', '2002:a9fe:a9fe::', '2001:0:4136:e378:8000:63bf:5601:5601', '::a9fe:a9fe', '::ffff:0:a9fe:a9fe']) {
      assert.equal(classifyAddress(a, true).allowed, false, a);
      assert.match((classifyAddress(a, true) as { reason: string }).reason, /carries 169\.254\.169\.254: is a link-local/u, a);
    }
    for (const a of ['64:ff9b::7f00:1', '2002:a00:1::', '::127.0.0.1', '64:ff9b:1::a00:1', '::ffff:0:a00:1']) {
      assert.equal(classifyAddress(a, false).allowed, false, a);
      assert.equal(classifyAddress(a, true).allowed, true, a);
    }
    for (const a of ['64:ff9b::808:808', '2002:808:808::1']) assert.equal(classifyAddress(a, false).allowed, true, a);
  });

  test('the test route is rate limited per user (10 per minute)', async () => {
    const port = await freePort();
    const res = await call('POST', '/api/admin/ssoProvider', tok.root, { account: w.accountA.id, name: 'x', type: 'oidc', issuer: idp.base, tokenEndpoint: `http://127.0.0.1:${port}/t`, clientId: 'c' });
    const id = res.json().data._id;
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) statuses.push((await call('POST', `/api/admin/ssoProvider/test/${id}`, tok.root)).statusCode);
    assert.deepEqual(statuses, [...Array(10).fill(200), 429]);
  });
});

describe('SSO providers with the default SSO_TEST_ALLOW_PRIVATE=false', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let idp: Awaited<ReturnType<typeof startIdpStub>>;
  let token = '';

  before(async () => {
    idp = await startIdpStub();
    t = await startTestApp();
    w = await makeWorld(t.database);
    token = (await login(t.app, w.accountAdminA.email)).accessToken;
  });
  after(async () => {
    await t.close();
    await idp.close();
  });

  const create = (tokenEndpoint: string) =>
    t.app.inject({ method: 'POST', url: '/api/admin/ssoProvider', headers: bearer(token), payload: { name: 'x', type: 'oidc', issuer: 'https://idp.example.com', tokenEndpoint, clientId: 'c' } });

  test('http: URLs and literal private or loopback addresses are refused at creation', async () => {
    assert.match(expectError(await create(`${idp.base}/token`), 400, 'VALIDATION_FAILED').message, /must be https:/);
    assert.match(expectError(await create('https://127.0.0.1/token'), 400, 'VALIDATION_FAILED').message, /private or loopback/);
    assert.match(expectError(await create('https://[::1]/token'), 400, 'VALIDATION_FAILED').message, /private or loopback/);
    assert.match(expectError(await create('https://10.0.0.5/token'), 400, 'VALIDATION_FAILED').message, /private or loopback/);
  });

  test('a name that resolves to loopback is refused after DNS resolution, without connecting', async () => {
    const res = await create(`https://localhost:${idp.port}/token`);
    assert.equal(res.statusCode, 201, res.body);
    const before = idp.connections();
    const tested = await t.app.inject({ method: 'POST', url: `/api/admin/ssoProvider/test/${res.json().data._id}`, headers: bearer(token) });
    assert.equal(tested.statusCode, 200);
    const body = tested.json();
    assert.deepEqual([body.success, body.reachable, body.status], [false, false, 0]);
    assert.match(body.message, /^Refused: localhost resolves to .* private or loopback address/);
    assert.equal(idp.connections(), before, 'no connection was made');
  });
});
