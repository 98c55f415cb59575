import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { ManualClock } from '../src/shared/clock.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { ClientSockets, listenLocally, waitFor } from './support/realtime.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

/**
 * The gateway checks a socket's session again when an invalidation concerns it; every `institution`, `account` or
 * `all` invalidation concerns every socket of the node. The check went through the per-request path, which also
 * records the session's activity: an administrator changing one institution moved last_activity_at of other
 * tenants' idle sessions with an open tab, and POST /api/admin/sessions reported them as active. The re-check no
 * longer counts as activity.
 */
describe('realtime: a socket re-check is not activity of its session', () => {
  const clock = new ManualClock(Date.now());
  let t: TestApp;
  let w: World;
  let base = '';
  const sockets = new ClientSockets();

  before(async () => {
    t = await startTestApp({ clock, env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '1000', INGEST_WORKERS: '0', ACCESS_TOKEN_TTL_SECONDS: '86400' } });
    base = await listenLocally(t.app);
    w = await makeWorld(t.database);
  });
  after(async () => {
    sockets.closeAll();
    await t.close();
  });

  const lastActivity = async (sessionId: string) =>
    new Date((await rowsOf<{ at: string }>(t.database.db, sql`select last_activity_at as at from sessions where id = ${sessionId}`))[0]!.at).getTime();

  test("an administrator's change to another tenant's institution does not make an idle session active", async () => {
    const idle = await login(t.app, w.userB1.email);
    const sessionId = JSON.parse(Buffer.from(idle.accessToken.split('.')[1]!, 'base64url').toString()).sid as string;
    const socket = await sockets.open(base, idle.accessToken);
    const onServer = t.app.realtime.io.sockets.sockets.get(socket.id!)!;
    await t.app.ctx.auth.activity.flush();
    const before = await lastActivity(sessionId);

    // two hours pass; the user of Beta College does nothing
    clock.advance(2 * 3_600_000);
    const root = (await login(t.app, w.superadmin.email)).accessToken;
    // a superadmin renames nothing of Beta: it switches Acme History off and on again
    for (const status of ['inactive', 'active']) {
      const res = await t.app.inject({ method: 'PATCH', url: `/api/admin/institution/${w.a2.id}`, headers: bearer(root), payload: { status } });
      assert.equal(res.statusCode, 200, res.body);
      // each change made the gateway check the socket's session again: its check is over before the next
      await waitFor(() => ((onServer.data as { checks?: number }).checks ?? 0) === 0, "the gateway's check of the idle socket");
    }
    await t.app.ctx.auth.activity.flush();
    assert.equal(socket.connected, true);
    const after = await lastActivity(sessionId);
    assert.equal(
      after,
      before,
      `the idle session's last_activity_at moved by ${Math.round((after - before) / 60_000)} min without any request of its own`,
    );
    // and the admin listing reports it as active in the last hour
    const listed = await t.app.inject({
      method: 'POST',
      url: '/api/admin/sessions',
      headers: bearer(root),
      payload: { usersearch: w.userB1.email, daterange: [new Date(clock.now().getTime() - 3_600_000).toISOString(), clock.now().toISOString()] },
    });
    assert.equal(listed.statusCode, 200, listed.body);
    assert.equal(listed.json().data.filter((s: { _id: string }) => s._id === sessionId).length, 0, 'listed as active in the last hour');
  });
});
