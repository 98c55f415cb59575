import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from './support/app.js';

const ALLOWED = 'https://app.example.com';
const OTHER = 'https://evil.example.com';
const POLLING = '/socket.io/?EIO=4&transport=polling';

/** One HTTP request to the listening app (node:http, so that the Origin header is sent as given). */
function call(base: string, path: string, options: { method?: string; headers?: Record<string, string> } = {}) {
  return new Promise<{ status: number; headers: IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const req = request(new URL(path, base), { method: options.method ?? 'GET', headers: options.headers ?? {} }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

async function listening(env: Record<string, string>): Promise<{ t: TestApp; base: string }> {
  const t = await startTestApp({ env });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  return { t, base: `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}` };
}

/**
 * Socket.IO answers /socket.io/ before Fastify (and @fastify/cors) sees the request: the gateway must
 * give Socket.IO the CORS_ORIGINS allow-list itself, or a browser app on an allowed origin cannot use
 * the polling transport.
 */
describe('Socket.IO and CORS_ORIGINS', () => {
  describe('with CORS_ORIGINS set to one origin', () => {
    let t: TestApp;
    let base = '';
    before(async () => {
      ({ t, base } = await listening({ CORS_ORIGINS: ALLOWED }));
    });
    after(() => t.close());

    test('a polling handshake from the allowed origin carries its allow-origin and credentials', async () => {
      const res = await call(base, POLLING, { headers: { origin: ALLOWED } });
      assert.equal(res.status, 200, res.body);
      assert.match(res.body, /^0\{"sid":/, 'an Engine.IO open packet');
      assert.equal(res.headers['access-control-allow-origin'], ALLOWED);
      assert.equal(res.headers['access-control-allow-credentials'], 'true');
    });

    test('a preflight from the allowed origin is answered for it', async () => {
      const res = await call(base, POLLING, { method: 'OPTIONS', headers: { origin: ALLOWED, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' } });
      assert.ok(res.status === 204 || res.status === 200, `status ${res.status}`);
      assert.equal(res.headers['access-control-allow-origin'], ALLOWED);
      assert.equal(res.headers['access-control-allow-credentials'], 'true');
    });

    test('another origin gets no allow-origin header (and never *)', async () => {
      const res = await call(base, POLLING, { headers: { origin: OTHER } });
      assert.equal(res.status, 200, res.body);
      assert.equal(res.headers['access-control-allow-origin'], undefined);
      const preflight = await call(base, POLLING, { method: 'OPTIONS', headers: { origin: OTHER, 'access-control-request-method': 'POST' } });
      assert.equal(preflight.headers['access-control-allow-origin'], undefined);
    });

    test('the API routes keep answering the allowed origin the same way (one allow-list for both)', async () => {
      const res = await call(base, '/healthz', { headers: { origin: ALLOWED } });
      assert.equal(res.headers['access-control-allow-origin'], ALLOWED);
    });
  });

  describe('without CORS_ORIGINS', () => {
    let t: TestApp;
    let base = '';
    before(async () => {
      ({ t, base } = await listening({}));
    });
    after(() => t.close());

    test('no CORS headers on Socket.IO, whatever the origin', async () => {
      for (const origin of [ALLOWED, OTHER]) {
        const res = await call(base, POLLING, { headers: { origin } });
        assert.equal(res.status, 200, res.body);
        assert.match(res.body, /^0\{"sid":/, 'an Engine.IO open packet');
        assert.equal(res.headers['access-control-allow-origin'], undefined, origin);
        assert.equal(res.headers['access-control-allow-credentials'], undefined, origin);
      }
    });
  });
});
