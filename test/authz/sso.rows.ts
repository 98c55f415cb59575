/**
 * Rows of the SSO module (rest engineer, issue 10). Providers belong to an account: managed with
 * sso.manage (account admin of the account, superadmin), read and tested with sso.test (also the
 * institution admins of the account). A plain user is 403 on every /api/admin/* route. The target is a
 * provider of account A whose token endpoint is a literal loopback address: the test refuses it without
 * connecting (the matrix runs with SSO_TEST_ALLOW_PRIVATE false), so no cell sends traffic anywhere.
 */
import assert from 'node:assert/strict';
import { insertProvider } from '../../src/modules/sso/sso.repository.js';
import { newId } from '../../src/shared/ids.js';
import { authed, CANARY_A, type Expect, type Row, type World } from './fixture.js';

const makeProvider = (w: World) =>
  insertProvider(w.database.db, { id: newId(), accountId: w.accountA.id, name: `IdP ${CANARY_A}`, type: 'oidc', issuer: 'https://127.0.0.1', tokenEndpoint: 'https://127.0.0.1:9/token', clientId: `client ${CANARY_A}` });
const fixed = new WeakMap<World, Promise<{ id: string }>>();
const providerA = (w: World) => {
  let p = fixed.get(w);
  if (!p) fixed.set(w, (p = makeProvider(w)));
  return p;
};

const gate = { otherAccountUser: 403, otherInstitutionMember: 403, member: 403 } as const;
const readA: Expect = authed({ ...gate, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 200 });
const manageA: Expect = authed({ ...gate, institutionAdmin: 403, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 200 });

export const rows: Row[] = [
  {
    // Into the caller's home account (each admin its own).
    route: 'POST /api/admin/ssoProvider',
    expect: authed({ ...gate, institutionAdmin: 403, accountAdmin: 201, otherAccountAdmin: 201, superadmin: 201 }),
    request: ({ principal }) => ({ payload: { name: `IdP of ${principal}`, type: 'oidc', issuer: 'https://idp.matrix.test', tokenEndpoint: 'https://idp.matrix.test/token', clientId: 'c', clientSecret: 's' } }),
  },
  {
    route: 'GET /api/admin/ssoProviders',
    expect: authed({ ...gate, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 }),
    request: async ({ w }) => {
      await providerA(w);
      return {};
    },
  },
  { route: 'GET /api/admin/ssoProvider/:id', expect: readA, request: async ({ w }) => ({ params: { id: (await providerA(w)).id } }) },
  {
    route: 'PATCH /api/admin/ssoProvider/:id',
    expect: manageA,
    request: async ({ w, principal }) => ({ params: { id: (await providerA(w)).id }, payload: { name: `IdP ${CANARY_A} renamed by ${principal}` } }),
  },
  {
    route: 'DELETE /api/admin/ssoProvider/:id',
    expect: manageA,
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await makeProvider(w)).id : (await providerA(w)).id } }),
  },
  {
    route: 'POST /api/admin/ssoProvider/test/:id',
    expect: readA,
    request: async ({ w }) => ({ params: { id: (await providerA(w)).id } }),
    check: (res) => {
      const body = res.json();
      assert.deepEqual([body.reachable, body.status], [false, 0]);
      assert.match(body.message, /private or loopback/);
    },
  },
];
