import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from './support/app.js';

/** A request arriving while the server drains (shutdown's preClose) must still get the contract's error body. */
describe('shutdown: requests that arrive during the drain', () => {
  let t: TestApp;
  let port: number;
  before(async () => {
    t = await startTestApp({ env: { SHUTDOWN_TIMEOUT_MS: '10000' } });
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    port = (t.app.server.address() as AddressInfo).port;
  });
  after(async () => {
    await t.close().catch(() => undefined);
  });

  test('a request that arrives while in-flight requests drain gets 503 with the contract error body ({success:false, message, error:{code}})', async () => {
    // one request in flight: headers sent, body not finished, so the drain waits for it
    const held: Socket = connect(port, '127.0.0.1');
    await new Promise<void>((r) => held.once('connect', () => r()));
    held.write('POST /api/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":');
    // polled, not guessed: the held request is counted in flight, then the drain has begun
    const until = async (ready: () => boolean) => {
      while (!ready()) await new Promise((r) => setTimeout(r, 5));
    };
    await until(() => t.app.ctx.shutdown.requestsInFlight === 1);
    const closing = t.app.close();
    await until(() => t.app.ctx.shutdown.closing.aborted);
    const res = await new Promise<{ status: number; body: string; headers: Record<string, string | string[] | undefined> }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/api/user/me', method: 'GET', agent: false }, (r) => {
        let body = '';
        r.on('data', (d) => (body += d));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body, headers: r.headers }));
      });
      req.on('error', reject);
      req.end();
    });
    held.destroy();
    await closing.catch(() => undefined);
    assert.equal(res.status, 503);
    const json = JSON.parse(res.body);
    assert.equal(json.success, false, `body was ${res.body}`);
    assert.equal(json.error?.code, 'SERVICE_UNAVAILABLE', `body was ${res.body}`);
    assert.equal(res.headers['retry-after'], '1');
    assert.equal(res.headers.connection, 'close');
    assert.equal(res.headers['x-content-type-options'], 'nosniff');
  });
});
