import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { vector } from '@electric-sql/pglite-pgvector';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { buildApp, type App } from '../src/app.js';
import { runCli } from '../src/cli.js';
import { testConfig } from './support/app.js';

/**
 * The DATABASE_URL path: node-postgres over the wire protocol, same migrations. The server is a PGlite
 * (with pgvector and pg_trgm) exposed on 127.0.0.1 by pglite-socket, since the machine's PostgreSQL
 * has no pgvector.
 */
describe('PostgreSQL driver (DATABASE_URL)', () => {
  let pglite: PGlite;
  let server: PGLiteSocketServer;
  let dataDir: string;
  let url: string;
  const apps: App[] = [];

  before(async () => {
    pglite = await PGlite.create({ dataDir: 'memory://', extensions: { vector, pg_trgm } });
    server = new PGLiteSocketServer({ db: pglite, port: 0, host: '127.0.0.1', maxConnections: 20 });
    await server.start();
    url = `postgres://postgres@${server.getServerConn()}/postgres`;
    dataDir = mkdtempSync(join(tmpdir(), 'twin-pg-'));
  });
  after(async () => {
    for (const app of apps) await app.close();
    await server.stop();
    await pglite.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('two nodes on one database: the second finds it migrated; tokens work across nodes', async () => {
    const env = { DATABASE_URL: url, BOOTSTRAP_ADMIN_EMAIL: 'pg@example.com', BOOTSTRAP_ADMIN_PASSWORD: 'pg-password-1' };
    // One after the other: PGlite multiplexes every socket connection into ONE session, so the advisory
    // lock that serialises concurrent migrations on a real PostgreSQL cannot be exercised here.
    apps.push(await buildApp({ config: testConfig(dataDir, env) }));
    apps.push(await buildApp({ config: testConfig(dataDir, env) }));
    const ready = await apps[0]!.inject({ method: 'GET', url: '/readyz' });
    assert.deepEqual(ready.json(), { success: true, status: 'ready', database: 'postgres' });
    const login = await apps[1]!.inject({ method: 'POST', url: '/api/auth/login', payload: { email: 'pg@example.com', password: 'pg-password-1' } });
    assert.equal(login.statusCode, 200, login.body);
    // a token issued by one node is accepted by the other: all state is in the database
    const me = await apps[0]!.inject({ method: 'GET', url: '/api/user/me', headers: { authorization: `Bearer ${login.json().accessToken}` } });
    assert.equal(me.statusCode, 200);
    assert.equal(me.json().data.role, 'superadmin');
  });

  test('the CLI works against DATABASE_URL', async () => {
    const lines: string[] = [];
    const code = await runCli(['create-admin', '--email', 'pg2@example.com', '--password', 'pg-password-2'], { NODE_ENV: 'test', DATA_DIR: dataDir, DATABASE_URL: url, LOG_LEVEL: 'silent' }, (l) => lines.push(l));
    assert.equal(code, 0);
    assert.match(lines.join('\n'), /superadmin pg2@example.com created/);
  });
});
