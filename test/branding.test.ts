import { after, before, describe, test } from 'node:test';
import { createHash } from 'node:crypto';
import assert from 'node:assert/strict';
import { eq } from 'drizzle-orm';
import { institutions } from '../src/db/schema.js';
import { BrandingCache } from '../src/modules/branding/branding.cache.js';
import { LocalInvalidationBus } from '../src/platform/invalidation.js';
import { ManualClock, systemClock } from '../src/shared/clock.js';
import { newPublicId } from '../src/shared/ids.js';
import { bearer, login, makeInstitution, makeWorld, startTestApp, type TestApp } from './support/app.js';

describe('context lookup and branding', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  const tok = {} as Record<'root' | 'adminA' | 'userA1' | 'userB1', string>;
  const CONTEXT = 'https://lms.example.edu/courses/42';
  const CONTEXT_A2 = 'https://lms.example.edu/courses/43';

  const branding = (publicId: unknown, headers: Record<string, string> = {}) =>
    t.app.inject({ method: 'POST', url: '/api/agent/branding', payload: { publicId }, headers });
  const lookup = (payload: unknown, token?: string) =>
    t.app.inject({ method: 'POST', url: '/api/auth/getInstitutionsForContextid', payload: payload as object, headers: token ? bearer(token) : {} });

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    await t.database.db
      .update(institutions)
      .set({
        ltiContextIds: [CONTEXT, 'https://other.example/x'],
        picture: 'https://cdn.example/newton.png',
        pictureBg: 'https://cdn.example/bg.png',
        about: 'Physics tutor',
        voiceAgentId: 'voice-1',
        contactEmail: 'physics@acme.test',
        credits: 250,
        invoicesUrls: ['https://billing.example/1'],
      })
      .where(eq(institutions.id, w.a1.id));
    await t.database.db.update(institutions).set({ ltiContextIds: [CONTEXT_A2] }).where(eq(institutions.id, w.a2.id));
    await t.database.db.update(institutions).set({ ltiContextIds: ['https://beta.example/law'] }).where(eq(institutions.id, w.b1.id));
    for (const [name, user] of Object.entries({ root: w.superadmin, adminA: w.accountAdminA, userA1: w.userA1, userB1: w.userB1 })) {
      tok[name as keyof typeof tok] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(() => t.close());

  const PRIVATE = ['credits', 'creditAward', 'creditsTotal', 'creditsUsagePct', 'invoices_urls', 'contactEmail', 'maxFiles', 'maxCompletionTokens'];

  test('context lookup without a token: the public projection of the matching institution', async () => {
    const res = await lookup({ ltiContextId: CONTEXT });
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.equal(body.success, true);
    assert.deepEqual(body.institutions.map((i: any) => i._id), [w.a1.id]);
    const physics = body.institutions[0];
    for (const f of PRIVATE) assert.equal(f in physics, false, `${f} must not be public`);
    assert.equal(physics._id, physics.id);
    assert.equal(physics.publicId, w.a1.publicId);
    assert.ok(physics.ltiContextIds.includes(CONTEXT));
    assert.equal(physics.picture, 'https://cdn.example/newton.png');
    assert.equal(physics.ainame, 'Newton');
    assert.deepEqual((await lookup({ ltiContextId: CONTEXT_A2 })).json().institutions.map((i: any) => i.name), ['Acme History']);

    assert.deepEqual((await lookup({ ltiContextId: 'https://lms.example.edu/courses/4' })).json().institutions, [], 'exact match only');
    assert.equal((await lookup({ ltiContextId: '' })).statusCode, 400);
    assert.equal((await lookup({})).statusCode, 400);
  });

  test('context lookup with a token: the full record where the caller is a member or admin; a bad token is a 401', async () => {
    const full = async (context: string, token: string) => (await lookup({ ltiContextId: context }, token)).json().institutions[0];
    const physics = await full(CONTEXT, tok.userA1);
    assert.equal(physics.credits, 250);
    assert.equal(physics.contactEmail, 'physics@acme.test');
    assert.deepEqual(physics.invoices_urls, ['https://billing.example/1']);
    assert.equal(physics.creditsTotal, 250);
    assert.equal(physics.maxFiles, 1000);
    assert.equal('credits' in (await full(CONTEXT_A2, tok.userA1)), false, 'not a member of Acme History: public projection');
    assert.equal('credits' in (await full(CONTEXT_A2, tok.adminA)), true, 'the account admin administers it');
    assert.equal('credits' in (await full(CONTEXT, tok.root)), true);
    assert.equal('credits' in (await full(CONTEXT, tok.userB1)), false);

    const garbage = await lookup({ ltiContextId: CONTEXT }, 'not-a-token');
    assert.equal(garbage.statusCode, 401);
    assert.equal(garbage.json().error.code, 'UNAUTHENTICATED');
  });

  test('branding: 200 with the spec object, Cache-Control and ETag; 304 on If-None-Match; 404 unknown; 400 malformed', async () => {
    const res = await branding(w.a1.publicId);
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), {
      picture: 'https://cdn.example/newton.png',
      picture_animated: '',
      picture_bg: 'https://cdn.example/bg.png',
      picture_dark_bg: '',
      voice_agent_id: 'voice-1',
      about: 'Physics tutor',
      ainame: 'Newton',
      status: 'active',
    });
    assert.match(String(res.headers['content-type']), /^application\/json/);
    assert.equal(res.headers['cache-control'], 'public, max-age=60');
    const etag = String(res.headers.etag);
    assert.match(etag, /^"[\w-]+"$/);

    const again = await branding(w.a1.publicId, { 'if-none-match': etag });
    assert.equal(again.statusCode, 304);
    assert.equal(again.body, '');
    assert.equal(again.headers.etag, etag);
    assert.equal((await branding(w.a1.publicId, { 'if-none-match': `"other", W/${etag}` })).statusCode, 304);
    assert.equal((await branding(w.a1.publicId, { 'if-none-match': '"other"' })).statusCode, 200);
    assert.equal((await branding(w.a1.publicId.toUpperCase())).json().ainame, 'Newton', 'UUIDs compare case-insensitively');

    const unknown = await branding(newPublicId());
    assert.equal(unknown.statusCode, 404);
    assert.equal(unknown.json().error.code, 'NOT_FOUND');
    for (const bad of ['nope', '1234', `${w.a1.publicId}x`, 42, null]) {
      const r = await branding(bad);
      assert.equal(r.statusCode, 400, `publicId ${String(bad)}`);
      assert.equal(r.json().error.code, 'VALIDATION_FAILED');
    }
    assert.equal((await t.app.inject({ method: 'POST', url: '/api/agent/branding' })).statusCode, 400);
  });

  test('a branding outside ASCII: Content-Length counts its UTF-8 bytes, the body decodes as sent, the ETag hashes those bytes', async () => {
    const about = 'Zoë enseña física ✓ — 数学 🚀';
    const twin = await makeInstitution(t.database, w.accountA.id, { ainame: 'Zoë', about });
    const res = await branding(twin.publicId);
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().about, about);
    assert.equal(res.json().ainame, 'Zoë');
    assert.equal(Number(res.headers['content-length']), res.rawPayload.length);
    assert.equal(res.rawPayload.toString('utf8'), res.body);
    // the cache keeps the encoded bytes it sends; the ETag is the hash of those bytes
    assert.equal(res.headers.etag, `"${createHash('sha256').update(res.rawPayload).digest('base64url').slice(0, 27)}"`);
    assert.equal((await branding(twin.publicId, { 'if-none-match': String(res.headers.etag) })).statusCode, 304);
  });

  test('branding is served from the cache and invalidated when the institution is updated or deleted', async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { ainame: 'Curie', picture: 'https://cdn.example/curie.png' });
    const first = await branding(inst.publicId);
    assert.equal(first.json().ainame, 'Curie');
    const etag = String(first.headers.etag);

    // A write that bypasses the service is not seen: the answer comes from the cache.
    await t.database.db.update(institutions).set({ ainame: 'Behind the cache' }).where(eq(institutions.id, inst.id));
    assert.equal((await branding(inst.publicId)).json().ainame, 'Curie');

    // An update through the API invalidates: the new branding and a new ETag at once.
    const patched = await t.app.inject({ method: 'PATCH', url: `/api/admin/institution/${inst.id}`, headers: bearer(tok.adminA), payload: { ainame: 'Marie', status: 'inactive' } });
    assert.equal(patched.statusCode, 200, patched.body);
    const fresh = await branding(inst.publicId, { 'if-none-match': etag });
    assert.equal(fresh.statusCode, 200);
    assert.equal(fresh.json().ainame, 'Marie');
    assert.equal(fresh.json().status, 'inactive');
    assert.notEqual(fresh.headers.etag, etag);

    const deleted = await t.app.inject({ method: 'DELETE', url: `/api/admin/institution/${inst.id}`, headers: bearer(tok.adminA) });
    assert.equal(deleted.statusCode, 200);
    assert.equal((await branding(inst.publicId)).statusCode, 404);
  });

  test("a twin of an inactive account is inactive in its branding, at once and on every node's cache", async () => {
    const inst = await makeInstitution(t.database, w.accountB.id, { ainame: 'Noether' });
    const before = await branding(inst.publicId);
    assert.equal(before.json().status, 'active');
    const setStatus = async (status: string) => {
      const res = await t.app.inject({ method: 'PATCH', url: `/api/admin/account/${w.accountB.id}`, headers: bearer(tok.root), payload: { status } });
      assert.equal(res.statusCode, 200, res.body);
    };
    await setStatus('inactive');
    const off = await branding(inst.publicId, { 'if-none-match': String(before.headers.etag) });
    assert.equal(off.statusCode, 200);
    assert.equal(off.json().status, 'inactive');
    assert.equal(off.json().ainame, 'Noether');
    await setStatus('active');
    const on = await branding(inst.publicId);
    assert.equal(on.json().status, 'active');
    assert.equal(on.headers.etag, before.headers.etag);
  });

  test('a load that started before an invalidation does not store its stale result', async () => {
    const bus = new LocalInvalidationBus();
    const cache = new BrandingCache(bus, systemClock);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const pending = cache.get('p1', async () => {
      await gate;
      return { found: true, institutionId: 'i1', body: Buffer.from('{"ainame":"old"}'), etag: '"old"' };
    });
    await bus.publish('institution', { id: 'i1' });
    release();
    assert.equal((await pending).found, true);
    assert.equal(cache.peek('p1'), undefined, 'the stale load was not cached');

    await cache.get('p1', async () => ({ found: true, institutionId: 'i1', body: Buffer.from('{}'), etag: '"new"' }));
    assert.equal(cache.size, 1);
    await bus.publish('institution', { id: 'i1' });
    assert.equal(cache.size, 0);
    cache.unsubscribe();
  });

  test('misses of one public id share the read in flight; a miss after an invalidation reads again', async () => {
    const bus = new LocalInvalidationBus();
    const cache = new BrandingCache(bus, systemClock);
    let loads = 0;
    let release!: () => void;
    let gate = new Promise<void>((r) => (release = r));
    const load = async () => {
      const n = ++loads;
      await gate;
      return { found: true as const, institutionId: 'i1', body: Buffer.from(`{"v":${n}}`), etag: `"${n}"` };
    };
    const burst = Array.from({ length: 20 }, () => cache.get('p1', load));
    release();
    const answers = await Promise.all(burst);
    assert.equal(loads, 1, 'twenty misses, one read');
    assert.ok(answers.every((a) => a === answers[0]));
    assert.equal(cache.size, 1);

    await bus.publish('institution', { id: 'i1' });
    gate = new Promise<void>((r) => (release = r));
    const older = cache.get('p1', load); // read 2 starts
    await bus.publish('institution', { id: 'i1' }); // changed again while it reads
    const newer = cache.get('p1', load); // does not join read 2
    release();
    assert.equal(((await older) as { etag: string }).etag, '"2"');
    assert.equal(((await newer) as { etag: string }).etag, '"3"');
    assert.equal(((cache.peek('p1') ?? {}) as { etag?: string }).etag, '"3"', 'only the read after the last change is held');
    cache.unsubscribe();
  });

  test('a found branding is read again after positiveTtlMs even without an invalidation (one lost on the way)', async () => {
    const clock = new ManualClock(1_000_000);
    const cache = new BrandingCache(new LocalInvalidationBus(), clock, { positiveTtlMs: 60_000 });
    let loads = 0;
    const load = async () => {
      loads++;
      return { found: true as const, institutionId: 'i1', body: Buffer.from(`{"v":${loads}}`), etag: `"${loads}"` };
    };
    await cache.get('p1', load);
    clock.advance(59_999);
    await cache.get('p1', load);
    assert.equal(loads, 1);
    clock.advance(1);
    assert.equal(cache.peek('p1'), undefined);
    assert.equal(((await cache.get('p1', load)) as { etag: string }).etag, '"2"');
    assert.equal(loads, 2);
    cache.unsubscribe();
  });
});
