import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestApp, makeWorld, makeUser, login, bearer } from './support/app.js';

/**
 * Expected status per principal for every route of issue 10 (rest engineer), checked against the real
 * app. Columns: no token, garbage token, expired token, revoked session, user of another account, member
 * of another institution of the same account, member of the target institution, its institution admin,
 * account admin of another account, superadmin. Targets live in institution A1 of account A.
 * The conversion into test/authz/ rows is mechanical once that convention is on main.
 */
test('authorization matrix of memory, settings, branding, cloud, SSO and admin sessions routes', async () => {
  const t = await startTestApp({ env: { SSO_TEST_ALLOW_PRIVATE: 'true', LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000', CLOUD_REVOKE_URLS: '{"okdrive":"http://127.0.0.1:9/revoke"}' } });
  try {
    const w = await makeWorld(t.database);
    const member2 = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const tk = async (u: { email: string }) => (await login(t.app, u.email)).accessToken;
    const revokedSession = await login(t.app, w.userA1.email);
    await t.app.inject({ method: 'POST', url: '/api/auth/logout', headers: bearer(revokedSession.accessToken) });
    // a token signed a day ago for a live session: only its expiry (15 min) refuses it
    const live = await login(t.app, member2.email);
    const liveClaims = await t.app.ctx.tokens.verifyAccess(live.accessToken, new Date());
    const expired = await t.app.ctx.tokens.signAccess(liveClaims, new Date(Date.now() - 86_400_000));
    const P: Record<string, string | null> = {
      none: null, garbage: 'garbage', expired, revoked: revokedSession.accessToken,
      otherAccountUser: await tk(w.userB1), otherInstSameAccount: await tk(w.userA2), member: await tk(member2), instAdmin: await tk(w.adminA1), otherAccountAdmin: await tk(w.accountAdminB), superadmin: await tk(w.superadmin),
    };
    const author = await tk(w.userA1);
    const adminA = await tk(w.accountAdminA);
    const j = async (method: string, url: string, token: string, payload?: unknown) => (await t.app.inject({ method: method as any, url, headers: bearer(token), ...(payload !== undefined ? { payload: payload as object } : {}) })).json();
    type R = { name: string; method: string; url: (() => Promise<string>) | string; payload?: (i: number) => unknown; expect: number[] };
    const memId = async () => (await j('POST', '/api/user/memory', author, { key_name: 'k', key_value: 'v', shared: true })).data._id;
    let n = 0;
    const setId = async () => (await j('POST', '/api/user/setting', author, { key: `s${n++}` })).data._id;
    const ssoId = async () => (await j('POST', '/api/admin/ssoProvider', adminA, { name: 'x', type: 'oidc', issuer: 'http://127.0.0.1:9', tokenEndpoint: 'http://127.0.0.1:9/t', clientId: 'c' })).data._id;
    const routes: R[] = [
      { name: 'GET /api/user/memory', expect: [401, 401, 401, 401, 200, 200, 200, 200, 200, 200], method: 'GET', url: '/api/user/memory' },
      { name: 'POST /api/user/memory', expect: [401, 401, 401, 401, 201, 201, 201, 201, 201, 201], method: 'POST', url: '/api/user/memory', payload: () => ({ key_name: 'k', key_value: 'v' }) },
      { name: 'PUT /api/user/memory/{id} (shared row in A1 by another member)', expect: [401, 401, 401, 401, 404, 404, 403, 200, 404, 200], method: 'PUT', url: async () => `/api/user/memory/${await memId()}`, payload: () => ({ key_value: 'x' }) },
      { name: 'DELETE /api/user/memory/{id} (same)', expect: [401, 401, 401, 401, 404, 404, 403, 200, 404, 200], method: 'DELETE', url: async () => `/api/user/memory/${await memId()}` },
      { name: 'GET /api/admin/memory/user/{userId} (member of A1)', expect: [401, 401, 401, 401, 403, 403, 403, 200, 404, 200], method: 'GET', url: `/api/admin/memory/user/${w.userA1.id}` },
      { name: 'GET /api/admin/memory/institution/{A1}', expect: [401, 401, 401, 401, 403, 403, 403, 200, 404, 200], method: 'GET', url: `/api/admin/memory/institution/${w.a1.id}` },
      { name: 'DELETE /api/admin/memory/user/{userId}', expect: [401, 401, 401, 401, 403, 403, 403, 200, 404, 200], method: 'DELETE', url: `/api/admin/memory/user/${w.userA1.id}`, payload: () => ({ namespace: 'none' }) },
      { name: 'DELETE /api/admin/memory/institution/{A1}', expect: [401, 401, 401, 401, 403, 403, 403, 200, 404, 200], method: 'DELETE', url: `/api/admin/memory/institution/${w.a1.id}`, payload: () => ({ namespace: 'none' }) },
      { name: 'POST /api/user/setting', expect: [401, 401, 401, 401, 200, 200, 200, 200, 200, 403], method: 'POST', url: '/api/user/setting', payload: (i) => ({ key: `new-${i}-${n++}` }) },
      { name: 'GET /api/user/settings', expect: [401, 401, 401, 401, 200, 200, 200, 200, 200, 403], method: 'GET', url: '/api/user/settings' },
      { name: 'PUT /api/user/setting/{id} (A1, by another member)', expect: [401, 401, 401, 401, 404, 404, 403, 200, 404, 200], method: 'PUT', url: async () => `/api/user/setting/${await setId()}`, payload: () => ({ value: 'x' }) },
      { name: 'DELETE /api/user/setting/{id} (same)', expect: [401, 401, 401, 401, 404, 404, 403, 200, 404, 200], method: 'DELETE', url: async () => `/api/user/setting/${await setId()}` },
      { name: 'POST /api/auth/getInstitutionsForContextid', expect: [200, 401, 401, 401, 200, 200, 200, 200, 200, 200], method: 'POST', url: '/api/auth/getInstitutionsForContextid', payload: () => ({ ltiContextId: 'https://x' }) },
      { name: 'POST /api/agent/branding', expect: [200, 200, 200, 200, 200, 200, 200, 200, 200, 200], method: 'POST', url: '/api/agent/branding', payload: () => ({ publicId: w.a1.publicId }) },
      { name: 'PUT /api/admin/institution/{A1}/cloudprovider', expect: [401, 401, 401, 401, 404, 403, 403, 200, 404, 200], method: 'PUT', url: `/api/admin/institution/${w.a1.id}/cloudprovider`, payload: () => ({ provider: 'okdrive', accessToken: 't' }) },
      { name: 'DELETE /api/auth/cloudprovider/institution/{A1}/revoke', expect: [401, 401, 401, 401, 404, 403, 403, 200, 404, 200], method: 'DELETE', url: `/api/auth/cloudprovider/institution/${w.a1.id}/revoke` },
      { name: 'POST /api/admin/ssoProvider', expect: [401, 401, 401, 401, 403, 403, 403, 403, 201, 201], method: 'POST', url: '/api/admin/ssoProvider', payload: () => ({ name: 'x', type: 'oidc', issuer: 'http://127.0.0.1:9', tokenEndpoint: 'http://127.0.0.1:9/t', clientId: 'c' }) },
      { name: 'GET /api/admin/ssoProviders', expect: [401, 401, 401, 401, 403, 403, 403, 200, 200, 200], method: 'GET', url: '/api/admin/ssoProviders' },
      { name: 'GET /api/admin/ssoProvider/{id} (of account A)', expect: [401, 401, 401, 401, 403, 403, 403, 200, 404, 200], method: 'GET', url: async () => `/api/admin/ssoProvider/${await ssoId()}` },
      { name: 'PATCH /api/admin/ssoProvider/{id} (of account A)', expect: [401, 401, 401, 401, 403, 403, 403, 403, 404, 200], method: 'PATCH', url: async () => `/api/admin/ssoProvider/${await ssoId()}`, payload: () => ({ name: 'y' }) },
      { name: 'DELETE /api/admin/ssoProvider/{id} (of account A)', expect: [401, 401, 401, 401, 403, 403, 403, 403, 404, 200], method: 'DELETE', url: async () => `/api/admin/ssoProvider/${await ssoId()}` },
      { name: 'POST /api/admin/ssoProvider/test/{id} (of account A)', expect: [401, 401, 401, 401, 403, 403, 403, 200, 404, 200], method: 'POST', url: async () => `/api/admin/ssoProvider/test/${await ssoId()}` },
      { name: 'POST /api/admin/sessions', expect: [401, 401, 401, 401, 403, 403, 403, 200, 200, 200], method: 'POST', url: '/api/admin/sessions', payload: () => ({}) },
    ];
    let i = 0;
    for (const r of routes) {
      const cells: number[] = [];
      for (const [, token] of Object.entries(P)) {
        const url = typeof r.url === 'string' ? r.url : await r.url();
        const res = await t.app.inject({ method: r.method as any, url, headers: token ? bearer(token) : {}, ...(r.payload ? { payload: r.payload(i++) as object } : {}) });
        cells.push(res.statusCode);
      }
      assert.deepEqual(cells, r.expect, r.name);
    }
  } finally {
    await t.close();
  }
});
