import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../src/app.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { createEmbedder } from '../src/providers/embeddings/index.js';
import { bearer, login, makeWorld, openTestDatabase, startTestApp, testConfig, type TestApp } from './support/app.js';

describe('platform: errors, operations, OpenAPI', () => {
  let t: TestApp;
  let world: Awaited<ReturnType<typeof makeWorld>>;
  before(async () => {
    t = await startTestApp();
    world = await makeWorld(t.database);
  });
  after(() => t.close());

  test('unknown route → 404 with the contract body', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/nope?x=1' });
    assert.equal(res.statusCode, 404);
    assert.deepEqual(res.json(), { success: false, message: 'Route GET /api/nope not found', error: { code: 'NOT_FOUND', details: [] } });
  });

  test('malformed JSON body → 400 VALIDATION_FAILED', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', headers: { 'content-type': 'application/json' }, payload: '{"email": "a@b.c", "password": ' });
    assert.equal(res.statusCode, 400);
    const body = res.json();
    assert.equal(body.success, false);
    assert.equal(body.message, 'Malformed JSON body');
    assert.equal(body.error.code, 'VALIDATION_FAILED');
  });

  test('wrong type → 400 listing the field, and nothing changes', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'someone@example.com', password: 12345 } });
    assert.equal(res.statusCode, 400);
    const body = res.json();
    assert.equal(body.error.code, 'VALIDATION_FAILED');
    assert.equal(body.error.details[0].field, 'password');
    assert.match(body.message, /password must be string/);
  });

  test('every invalid field is listed (body and query), and a huge invalid body lists its first error without an error object per element', async () => {
    const { accessToken } = await login(t.app, world.userA1.email);
    const res = await t.app.inject({ method: 'POST', url: '/api/user/files/search-content', headers: bearer(accessToken), payload: { query: 5, limit: 0, minScore: 3 } });
    assert.equal(res.statusCode, 400, res.body);
    assert.deepEqual(res.json().error.details.map((d: { field: string }) => d.field).sort(), ['limit', 'minScore', 'query']);
    assert.equal(res.json().message, 'Invalid request: 3 problems');
    const query = await t.app.inject({ method: 'GET', url: '/api/user/files?page=0&pageSize=0', headers: bearer(accessToken) });
    assert.equal(query.statusCode, 400, query.body);
    assert.deepEqual(query.json().error.details.map((d: { field: string }) => d.field).sort(), ['page', 'pageSize']);
    // 200,000 numbers where at most 5,000 ids are allowed: the first problem listed, not an error object per element
    const root = (await login(t.app, world.superadmin.email)).accessToken;
    const bulk = (ids: unknown[]) => t.app.inject({ method: 'DELETE', url: `/api/admin/memory/institution/${world.a1.id}`, headers: bearer(root), payload: { ids } });
    const huge = await bulk(new Array(200_000).fill(1));
    assert.equal(huge.statusCode, 400, huge.body.slice(0, 300));
    assert.equal(huge.json().error.details.length, 1);
    // a small body with many bad elements: every one is a problem, the first 100 listed
    const many = await bulk(new Array(500).fill(1));
    assert.equal(many.statusCode, 400, many.body.slice(0, 300));
    assert.equal(many.json().error.details.length, 100);
    assert.equal(many.json().error.details[99].field, 'ids.99');
    assert.equal(many.json().message, 'Invalid request: 100 problems or more (the first 100 listed)');
  });

  test('listings and bulk deletes whose every body field is optional take no body, an empty one or a JSON null alike', async () => {
    const root = (await login(t.app, world.superadmin.email)).accessToken;
    for (const [method, url] of [
      ['POST', '/api/admin/accounts'],
      ['POST', '/api/admin/sessions'],
      ['POST', '/api/admin/feedbacks'],
      ['POST', '/api/admin/assistants'],
      ['POST', '/api/user/histories'],
      ['DELETE', `/api/admin/memory/institution/${world.a2.id}`],
    ] as const) {
      const statuses = [];
      for (const payload of [undefined, '', 'null']) {
        const res = await t.app.inject({ method, url, headers: { ...bearer(root), ...(payload !== undefined ? { 'content-type': 'application/json' } : {}) }, ...(payload !== undefined ? { payload } : {}) });
        statuses.push(res.statusCode);
      }
      assert.deepEqual(statuses, [200, 200, 200], `${method} ${url}`);
    }
  });

  test('out-of-range value → 400', async () => {
    const { accessToken } = await login(t.app, world.userA1.email);
    const res = await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { fname: 'x'.repeat(101) } });
    assert.equal(res.statusCode, 400);
    assert.equal(res.json().error.details[0].field, 'fname');
  });

  test('an over-long path id → 400 with the contract body, not a router error', async () => {
    const { accessToken } = await login(t.app, world.superadmin.email);
    const res = await t.app.inject({ method: 'GET', url: `/api/admin/account/${'x'.repeat(300)}`, headers: bearer(accessToken) });
    assert.equal(res.statusCode, 400);
    assert.equal(res.json().error.code, 'VALIDATION_FAILED');
  });

  test('authentication comes before validation: no token and a bad body → 401, not 400', async () => {
    for (const [method, url, payload] of [
      ['PATCH', '/api/user/me', { fname: 42 }],
      ['POST', '/api/user/collection', { color: 'red' }],
      ['POST', '/api/user/collections/select-all-ids', { status: 'nope' }],
      ['PUT', '/api/user/embedding/not-a-uuid', { text: 7 }],
      ['POST', '/api/admin/accounts', { pageSize: 0 }],
    ] as const) {
      const res = await t.app.inject({ method, url, payload });
      assert.equal(res.statusCode, 401, `${method} ${url}: ${res.body}`);
      assert.equal(res.json().error.code, 'UNAUTHENTICATED');
    }
  });

  test('a NUL character anywhere (body, query, path) is a 400, never a 500', async () => {
    const { accessToken } = await login(t.app, world.superadmin.email);
    const cases = [
      t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'a\u0000@b.c', password: 'x' } }),
      t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { fname: 'Ma\u0000rie' } }),
      t.app.inject({ method: 'POST', url: '/api/admin/accounts', headers: bearer(accessToken), payload: { accountsearch: 'x\u0000' } }),
      t.app.inject({ method: 'GET', url: '/api/admin/users?search=a%00b', headers: bearer(accessToken) }),
      t.app.inject({ method: 'GET', url: '/api/admin/user/a%00b', headers: bearer(accessToken) }),
    ];
    for (const res of await Promise.all(cases)) {
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    }
  });

  test('malformed ids and page numbers beyond exact doubles are 400s; any other page past the last is empty', async () => {
    const { accessToken } = await login(t.app, world.superadmin.email);
    const badId = await t.app.inject({ method: 'GET', url: '/api/admin/user/not-a-uuid', headers: bearer(accessToken) });
    assert.equal(badId.statusCode, 400);
    assert.equal(badId.json().error.details[0].field, 'id');
    const hugePage = await t.app.inject({ method: 'POST', url: '/api/admin/accounts', headers: bearer(accessToken), payload: { page: 1e20 } });
    assert.equal(hugePage.statusCode, 400, 'beyond what a double counts exactly');
    // the spec bounds page below only: a page past the last is an empty page, however far
    for (const [url, payload] of [
      ['/api/admin/accounts', { page: 1_000_001 }],
      ['/api/admin/sessions', { page: Number.MAX_SAFE_INTEGER, pageSize: 5000 }],
      ['/api/admin/feedbacks', { page: 2 ** 40 }],
      ['/api/admin/assistants', { page: Number.MAX_SAFE_INTEGER }],
    ] as const) {
      const far = await t.app.inject({ method: 'POST', url, headers: bearer(accessToken), payload });
      assert.equal(far.statusCode, 200, `${url}: ${far.body}`);
      assert.deepEqual([far.json().data, far.json().hasMore, far.json().page], [[], false, payload.page], url);
    }
    const farQuery = await t.app.inject({ method: 'GET', url: `/api/admin/users?page=${Number.MAX_SAFE_INTEGER}&pageSize=5000`, headers: bearer(accessToken) });
    assert.equal(farQuery.statusCode, 200, farQuery.body);
    assert.deepEqual(farQuery.json().data, []);
    const hugeQueryPage = await t.app.inject({ method: 'GET', url: '/api/admin/users?page=100000000000000000000', headers: bearer(accessToken) });
    assert.equal(hugeQueryPage.statusCode, 400);
  });

  test('JSON bodies: prototype poisoning is refused; an empty body means no body', async () => {
    const poisoned = await t.app.inject({ method: 'POST', url: '/api/auth/login', headers: { 'content-type': 'application/json' }, payload: '{"email":"a@b.c","password":"x","__proto__":{"admin":true}}' });
    assert.equal(poisoned.statusCode, 400);
    assert.equal(poisoned.json().error.code, 'VALIDATION_FAILED');
    const { accessToken } = await login(t.app, world.userA1.email);
    // logout takes no body: an empty JSON body is accepted as none
    const out = await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: { ...bearer(accessToken), 'content-type': 'application/json' }, payload: '' });
    assert.equal(out.statusCode, 200, out.body);
  });

  test('a body sent as text (fetch\'s default for a string body) is a 415 naming its content type, like any type the API does not read', async () => {
    const payload = JSON.stringify({ email: world.userA1.email, password: 'x' });
    for (const type of ['text/plain', 'text/plain;charset=UTF-8', 'application/xml']) {
      const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', headers: { 'content-type': type }, payload });
      assert.equal(res.statusCode, 415, `${type}: ${res.body}`);
      assert.deepEqual(res.json(), { success: false, message: `Unsupported content type: ${type}`, error: { code: 'UNSUPPORTED_MEDIA_TYPE', details: [] } });
    }
    // a route whose body is optional as well
    const { accessToken } = await login(t.app, world.userA1.email);
    const listed = await t.app.inject({ method: 'POST', url: '/api/user/histories', headers: { ...bearer(accessToken), 'content-type': 'text/plain' }, payload: '{"limit": 1}' });
    assert.equal(listed.statusCode, 415, listed.body);
  });

  test('what the router refuses (bad URL encoding, huge parameter) still gets the contract body', async () => {
    const { accessToken } = await login(t.app, world.superadmin.email);
    for (const url of ['/api/admin/user/%E0%A4%A', `/api/admin/user/${'x'.repeat(1500)}`]) {
      const res = await t.app.inject({ method: 'GET', url, headers: bearer(accessToken) });
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().success, false);
    }
  });

  test('ids are strict lower-case UUIDs: urn: prefixes and other spellings are 400s', async () => {
    const { accessToken } = await login(t.app, world.superadmin.email);
    for (const id of [`urn:uuid:${world.userA1.id}`, world.userA1.id.toUpperCase(), `{${world.userA1.id}}`]) {
      const res = await t.app.inject({ method: 'GET', url: `/api/admin/user/${encodeURIComponent(id)}`, headers: bearer(accessToken) });
      assert.equal(res.statusCode, 400, `${id}: ${res.body}`);
    }
    assert.equal((await t.app.inject({ method: 'GET', url: `/api/admin/user/${world.userA1.id}`, headers: bearer(accessToken) })).statusCode, 200);
  });

  test('anonymous requests get their 401 even with a NUL character in them', async () => {
    const res = await t.app.inject({ method: 'PATCH', url: '/api/user/me', payload: { fname: 'a\u0000b' } });
    assert.equal(res.statusCode, 401);
  });

  test('credit amounts below the 0.0001 unit are refused, not silently dropped', async () => {
    const { accessToken } = await login(t.app, world.superadmin.email);
    for (const amount of [1e-13, 5e-324, 0.00005]) {
      const res = await t.app.inject({ method: 'POST', url: `/api/admin/user/${world.userA2.id}/credits`, headers: bearer(accessToken), payload: { amount } });
      assert.equal(res.statusCode, 400, `${amount}: ${res.body}`);
    }
  });

  test('healthz, readyz, request id', async () => {
    const h = await t.app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'req-abc-123' } });
    assert.equal(h.statusCode, 200);
    assert.equal(h.headers['x-request-id'], 'req-abc-123');
    const r = await t.app.inject({ method: 'GET', url: '/readyz' });
    assert.deepEqual(r.json(), { success: true, status: 'ready', database: 'pglite' });
  });

  test('metrics count requests per route template with latency histograms', async () => {
    // The samples of the Prometheus text format, by series (name and labels as written).
    const scrape = async () => {
      const res = await t.app.inject({ method: 'GET', url: '/metrics' });
      assert.equal(res.statusCode, 200);
      assert.match(res.headers['content-type'] as string, /^text\/plain; version=0\.0\.4/);
      const samples = new Map<string, number>();
      for (const line of res.body.split('\n')) {
        const m = /^(\w+(?:\{[^}]*\})?) (\S+)$/.exec(line);
        if (m) samples.set(m[1]!, Number(m[2]));
      }
      return { text: res.body, samples };
    };
    const before = await scrape();
    for (let i = 0; i < 3; i++) await t.app.inject({ method: 'GET', url: '/healthz' });
    await t.app.inject({ method: 'GET', url: '/api/user/me' });
    await t.app.inject({ method: 'GET', url: '/api/user/me', headers: bearer((await login(t.app, world.userA1.email)).accessToken) });
    await t.app.inject({ method: 'GET', url: '/no/such/route/1' });
    await t.app.inject({ method: 'POST', url: '/no/such/route/2' });
    const after = await scrape();
    const delta = (series: string) => (after.samples.get(series) ?? 0) - (before.samples.get(series) ?? 0);

    assert.match(after.text, /# TYPE http_requests_total counter/);
    assert.match(after.text, /# TYPE http_request_duration_seconds histogram/);
    // per route template (not per URL) and status; the scrape itself is not counted
    assert.equal(delta('http_requests_total{method="GET",route="/healthz",status="200"}'), 3);
    assert.equal(delta('http_requests_total{method="GET",route="/api/user/me",status="401"}'), 1);
    assert.equal(delta('http_requests_total{method="GET",route="/api/user/me",status="200"}'), 1);
    assert.equal(delta('http_requests_total{method="GET",route="unmatched",status="404"}'), 1);
    assert.equal(delta('http_requests_total{method="POST",route="unmatched",status="404"}'), 1);
    assert.ok(![...after.samples.keys()].some((k) => k.includes('route="/metrics"')));
    assert.ok(![...after.samples.keys()].some((k) => k.includes('/no/such/route')));

    // the histogram: cumulative buckets ending in +Inf = _count, a positive _sum
    const buckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
    const series = (le: number | string) => `http_request_duration_seconds_bucket{le="${le}",method="GET",route="/healthz"}`;
    const counts = [...buckets, '+Inf'].map((le) => after.samples.get(series(le)));
    assert.ok(counts.every((c) => typeof c === 'number'), 'every bucket is written');
    for (let i = 1; i < counts.length; i++) assert.ok(counts[i]! >= counts[i - 1]!, 'buckets are cumulative');
    assert.equal(counts.at(-1), after.samples.get('http_request_duration_seconds_count{method="GET",route="/healthz"}'));
    assert.equal(delta('http_request_duration_seconds_count{method="GET",route="/healthz"}'), 3);
    assert.ok(delta('http_request_duration_seconds_sum{method="GET",route="/healthz"}') > 0);
    // the process's own metrics are still there
    assert.match(after.text, /^process_cpu_user_seconds_total \d/m);
  });

  test('OpenAPI: every route tagged and described, both security schemes, docs served', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/openapi.json' });
    assert.equal(res.statusCode, 200);
    const doc = res.json();
    assert.match(doc.openapi, /^3\./);
    assert.deepEqual(Object.keys(doc.components.securitySchemes).sort(), ['accessToken', 'bearerAuth']);
    assert.equal(doc.components.securitySchemes.accessToken.name, 'x-access-token');
    const operations = Object.entries(doc.paths as Record<string, Record<string, { tags?: string[]; summary?: string; security?: unknown[] }>>).flatMap(([path, ops]) =>
      Object.entries(ops).map(([method, op]) => ({ path, method, op })),
    );
    assert.ok(operations.length >= 9, `only ${operations.length} operations documented`);
    for (const { path, method, op } of operations) {
      assert.ok(op.tags && op.tags.length > 0, `${method} ${path} has no tag`);
      assert.ok(op.summary, `${method} ${path} has no summary`);
    }
    const me = doc.paths['/api/user/me'].get;
    assert.deepEqual(me.security, [{ bearerAuth: [] }, { accessToken: [] }]);
    const docs = await t.app.inject({ method: 'GET', url: '/docs/' });
    assert.equal(docs.statusCode, 200);
    assert.match(docs.body, /swagger/i);
  });

  test('OpenAPI: the statuses every route shares are documented on every route (400/413/415 before a body is read, Retry-After on 429)', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, { responses: Record<string, { headers?: Record<string, unknown> }>; requestBody?: { required?: boolean } }>>;
    };
    const operations = Object.entries(doc.paths).flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => ({ path, method, op })));
    const withBody = operations.filter(({ method }) => ['post', 'put', 'patch', 'delete'].includes(method));
    assert.ok(withBody.length >= 40, `only ${withBody.length} operations that may carry a body`);
    for (const { path, method, op } of withBody) {
      for (const status of ['400', '413', '415']) assert.ok(op.responses[status], `${method} ${path} does not document ${status}`);
    }
    const limited = operations.filter(({ op }) => op.responses['429']);
    assert.ok(limited.length >= 10, `only ${limited.length} operations document a 429`);
    for (const { path, method, op } of limited) assert.ok(op.responses['429']!.headers?.['Retry-After'], `${method} ${path}: its 429 does not declare Retry-After`);
    // routes that take no body at all say so (and answer without one); the others keep their body required
    const { accessToken } = await login(t.app, world.superadmin.email);
    for (const path of ['/api/user/histories', '/api/admin/accounts', '/api/admin/sessions', '/api/admin/feedbacks', '/api/admin/assistants']) {
      assert.equal(doc.paths[path]!.post!.requestBody?.required, false, `${path}: its body is optional`);
      const res = await t.app.inject({ method: 'POST', url: path, headers: bearer(accessToken) });
      assert.equal(res.statusCode, 200, `${path} without a body: ${res.body}`);
    }
    assert.equal(doc.paths['/api/user/files/search-content']!.post!.requestBody?.required, true);
    assert.ok(doc.paths['/api/user/files/search-content']!.post!.responses['502'], 'search-content documents its 502 (embedding provider)');

    // and the route answers them as documented
    const url = '/api/user/files/search-content';
    const form = await t.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'query=x' });
    assert.equal(form.statusCode, 415, form.body);
    assert.equal(form.json().error.code, 'UNSUPPORTED_MEDIA_TYPE');
    const big = await t.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ query: 'x'.repeat(3 * 1024 * 1024) }) });
    assert.equal(big.statusCode, 413, big.body);
    assert.equal(big.json().error.code, 'PAYLOAD_TOO_LARGE');
    const broken = await t.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: '{"query":' });
    assert.equal(broken.statusCode, 400, broken.body);
  });
});

describe('platform: unexpected errors never leak internals', () => {
  test('a thrown error becomes a 500 INTERNAL body with no stack', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-test-'));
    const database = await openTestDatabase();
    const app = await buildApp({ config: testConfig(dataDir), database, skipMigrations: true });
    app.get('/boom', async () => {
      throw new Error('secret internal detail at /srv/app.ts:42');
    });
    try {
      const res = await app.inject({ method: 'GET', url: '/boom' });
      assert.equal(res.statusCode, 500);
      assert.deepEqual(res.json(), { success: false, message: 'Internal server error', error: { code: 'INTERNAL', details: [] } });
      assert.doesNotMatch(res.body, /secret|stack|\.ts/);
    } finally {
      await app.close();
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('configuration', () => {
  test('production without secrets fails with every problem named', () => {
    assert.throws(
      () => loadConfig({ NODE_ENV: 'production', PORT: 'eighty', DATA_DIR: '/tmp/x' }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /JWT_SECRET is required when NODE_ENV=production/);
        assert.match(err.message, /ENCRYPTION_KEY is required/);
        assert.match(err.message, /PORT must be an integer from 0 to 65535 \(got "eighty"\)/);
        return true;
      },
    );
  });

  test('development generates secrets once and keeps them in DATA_DIR', () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-cfg-'));
    try {
      const a = loadConfig({ DATA_DIR: dataDir });
      const b = loadConfig({ DATA_DIR: dataDir });
      assert.equal(a.nodeEnv, 'development');
      assert.ok(a.jwtSecret.length >= 32);
      assert.equal(a.jwtSecret, b.jwtSecret);
      assert.equal(a.encryptionKey, b.encryptionKey);
      assert.equal(a.port, 3000);
      assert.equal(a.cookieSecure, false);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('openai-compatible providers need their endpoint', () => {
    assert.throws(() => loadConfig({ NODE_ENV: 'test', JWT_SECRET: 'x'.repeat(40), ENCRYPTION_KEY: 'y'.repeat(40), LLM_PROVIDER: 'openai-compatible' }), /LLM_BASE_URL is required/);
  });

  test('the local embedder is version 2 unless EMBEDDINGS_LOCAL_VERSION says 1; other values are refused', () => {
    const base = { NODE_ENV: 'test', JWT_SECRET: 'x'.repeat(40), ENCRYPTION_KEY: 'y'.repeat(40) };
    assert.equal(loadConfig(base).embeddings.localVersion, 2);
    assert.equal(loadConfig({ ...base, EMBEDDINGS_LOCAL_VERSION: '1' }).embeddings.localVersion, 1);
    assert.equal(createEmbedder(loadConfig({ ...base, EMBEDDINGS_LOCAL_VERSION: '1' }).embeddings).id, 'local:hashed-ngrams-v1:384');
    assert.equal(createEmbedder(loadConfig(base).embeddings).id, 'local:hashed-ngrams-v2:384');
    assert.throws(() => loadConfig({ ...base, EMBEDDINGS_LOCAL_VERSION: '3' }), /EMBEDDINGS_LOCAL_VERSION/);
  });
});
