/**
 * Rows of the tenancy module (admin management). Target: account A, institution A1, and users of A1.
 * A plain user is 403 on every admin route (the role gate, before any lookup, so nothing leaks);
 * an admin of another account is 404 on records of account A; an admin of account A without the
 * permission is 403.
 */
import assert from 'node:assert/strict';
import { newId } from '../../src/shared/ids.js';
import { PASSWORD } from '../support/app.js';
import { authed, type Expect, type Row } from './fixture.js';

/** Records of account A an account admin of A may act on; an institution admin of A1 may not. */
const accountLevel = (ok: number): Expect =>
  authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: ok, otherAccountAdmin: 404, superadmin: ok });
/** Records of A1 its admin may act on too. */
const institutionLevel = (ok: number): Expect =>
  authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: ok, accountAdmin: ok, otherAccountAdmin: 404, superadmin: ok });
/** Listings: every admin lists (its own scope), plain users are refused. */
const listing: Expect = authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 });

export const rows: Row[] = [
  // ───────────── accounts ─────────────
  {
    route: 'POST /api/admin/account',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 201 }),
    request: ({ principal }) => ({ payload: { name: `New account by ${principal}` } }),
  },
  {
    route: 'GET /api/admin/account/:id',
    expect: accountLevel(200),
    request: ({ w }) => ({ params: { id: w.accountA.id } }),
  },
  {
    route: 'PATCH /api/admin/account/:id',
    expect: accountLevel(200),
    request: ({ w, principal }) => ({ params: { id: w.accountA.id }, payload: { managerEmail: `${principal.toLowerCase()}@acme.test` } }),
  },
  {
    // Only a superadmin deletes an account (its success deletes a fresh account, not the world).
    route: 'DELETE /api/admin/account/:id',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 404, superadmin: 200 }),
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await w.makeAccount()).id : w.accountA.id } }),
  },
  {
    route: 'POST /api/admin/accounts',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 }),
    request: () => ({ payload: { insitutionsUsage: true } }),
    check: (res, { w, principal }) => {
      const ids = (res.json().data as Array<{ _id: string }>).map((a) => a._id);
      if (principal === 'accountAdmin') assert.deepEqual(ids, [w.accountA.id]);
      if (principal === 'otherAccountAdmin') assert.deepEqual(ids, [w.accountB.id]);
      if (principal === 'superadmin') assert.ok(ids.includes(w.accountA.id) && ids.includes(w.accountB.id));
    },
  },

  // ───────────── institutions ─────────────
  {
    route: 'POST /api/admin/institution',
    expect: accountLevel(201),
    request: ({ w, principal }) => ({ payload: { account: w.accountA.id, name: `Created by ${principal}`, ainame: 'Ada' } }),
  },
  {
    route: 'GET /api/admin/institutions',
    expect: listing,
    request: () => ({}),
    check: (res, { w, principal }) => {
      const ids = (res.json().data as Array<{ _id: string }>).map((i) => i._id);
      if (principal === 'institutionAdmin') assert.deepEqual(ids, [w.a1.id]);
      if (principal === 'otherAccountAdmin') assert.ok(ids.includes(w.b1.id) && !ids.includes(w.a1.id));
    },
  },
  {
    route: 'GET /api/admin/institution/:id',
    expect: institutionLevel(200),
    request: ({ w }) => ({ params: { id: w.a1.id } }),
  },
  {
    route: 'PATCH /api/admin/institution/:id',
    expect: institutionLevel(200),
    request: ({ w, principal }) => ({ params: { id: w.a1.id }, payload: { about: `About, as edited by ${principal}` } }),
  },
  {
    // Deleting: account level only. A success deletes a fresh institution of account A.
    route: 'DELETE /api/admin/institution/:id',
    expect: accountLevel(200),
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await w.makeInstitution(w.accountA.id)).id : w.a1.id } }),
  },
  {
    route: 'POST /api/admin/institution/:id/credits',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 404, superadmin: 200 }),
    request: ({ w }) => ({ params: { id: w.a1.id }, payload: { amount: 10 } }),
  },

  // ───────────── users ─────────────
  {
    // Institution admins create plain users into the institutions they administer.
    route: 'POST /api/admin/user',
    expect: institutionLevel(201),
    request: ({ w }) => ({
      payload: { email: `new-${newId().slice(-12)}@matrix.test`, password: PASSWORD, fname: 'New', lname: 'User', account: w.accountA.id, institutions: [{ institution: w.a1.id, role: 'user' }] },
    }),
  },
  {
    route: 'GET /api/admin/users',
    expect: listing,
    request: () => ({}),
    check: (res, { w, principal }) => {
      const ids = (res.json().data as Array<{ _id: string }>).map((u) => u._id);
      if (principal === 'otherAccountAdmin') assert.ok(ids.includes(w.users.otherAccountUser.id) && !ids.includes(w.users.member.id));
      if (principal === 'institutionAdmin') assert.ok(ids.includes(w.users.member.id) && !ids.includes(w.users.otherInstitutionMember.id));
    },
  },
  {
    route: 'GET /api/admin/user/:id',
    expect: institutionLevel(200),
    request: ({ w }) => ({ params: { id: w.targetUser.id } }),
  },
  {
    route: 'PATCH /api/admin/user/:id',
    expect: institutionLevel(200),
    request: ({ w, principal }) => ({ params: { id: w.targetUser.id }, payload: { location: `Set by ${principal}` } }),
  },
  {
    route: 'DELETE /api/admin/user/:id',
    expect: accountLevel(200),
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await w.makeUser(w.accountA.id, { [w.a1.id]: 'user' })).id : w.targetUser.id } }),
  },
  {
    route: 'POST /api/admin/user/:id/credits',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 404, superadmin: 200 }),
    request: ({ w }) => ({ params: { id: w.targetUser.id }, payload: { amount: 10 } }),
  },
  {
    // Moving credits an account holds: its account admin (and a superadmin); institution admins hold no
    // credits.transfer (403); another account's admin does not see A's balances (404). A success moves
    // from a fresh funded institution of A; refusals aim at A1.
    route: 'POST /api/admin/credits/transfer',
    expect: accountLevel(200),
    request: async ({ w, expected }) => ({
      payload: {
        from: { institution: expected === 200 ? (await w.makeInstitution(w.accountA.id, { credits: 100 })).id : w.a1.id },
        to: { user: w.targetUser.id },
        amount: 1,
      },
    }),
    check: (res) => assert.equal(res.json().data.from.credits, 99),
  },

  // ───────────── listings filtered to the target tenant: the filter never widens the scope ─────────────
  {
    route: 'GET /api/admin/users',
    variant: 'filtered to A1',
    expect: listing,
    request: ({ w }) => ({ query: { institution: w.a1.id, account: w.accountA.id, search: 'matrix' } }),
    check: (res, { principal }) => {
      if (principal === 'otherAccountAdmin') assert.equal(res.json().total, 0);
    },
  },
  {
    route: 'GET /api/admin/institutions',
    variant: 'filtered to account A',
    expect: listing,
    request: ({ w }) => ({ query: { account: w.accountA.id, search: 'Acme' } }),
    check: (res, { principal }) => {
      if (principal === 'otherAccountAdmin') assert.equal(res.json().total, 0);
    },
  },
  {
    route: 'POST /api/admin/accounts',
    variant: 'searching account A',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 }),
    request: () => ({ payload: { accountsearch: 'Acme', minimum: true, insitutionsUsage: true } }),
    check: (res, { principal }) => {
      if (principal === 'otherAccountAdmin') assert.equal(res.json().total, 0);
    },
  },

  // ───────────── escalations: what an admin may not do within its own tenant ─────────────
  {
    route: 'PATCH /api/admin/institution/:id',
    variant: 'account-level field',
    expect: accountLevel(200),
    request: ({ w, principal }) => ({ params: { id: w.a1.id }, payload: { maxFiles: 100 + principal.length } }),
  },
  {
    // A2 is in the institution admin's account but not administered by it: seen (403), not acted on.
    route: 'GET /api/admin/institution/:id',
    variant: 'A2',
    expect: accountLevel(200),
    request: ({ w }) => ({ params: { id: w.a2.id } }),
  },
  {
    route: 'GET /api/admin/user/:id',
    variant: 'member of A2',
    expect: accountLevel(200),
    request: ({ w }) => ({ params: { id: w.users.otherInstitutionMember.id } }),
  },
  {
    route: 'POST /api/admin/user',
    variant: 'as account admin',
    expect: accountLevel(201),
    request: ({ w }) => ({
      payload: { email: `aa-${newId().slice(-12)}@matrix.test`, password: PASSWORD, fname: 'New', lname: 'Admin', account: w.accountA.id, institutions: [], role: 'accountadmin' },
    }),
  },
  {
    route: 'PATCH /api/admin/user/:id',
    variant: 'make superadmin',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 403, accountAdmin: 403, otherAccountAdmin: 404, superadmin: 200 }),
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await w.makeUser(w.accountA.id, { [w.a1.id]: 'user' })).id : w.targetUser.id }, payload: { role: 'superadmin' } }),
  },
  {
    // A fellow admin of A1 is out of an institution admin's reach.
    route: 'PATCH /api/admin/user/:id',
    variant: 'fellow admin of A1',
    expect: accountLevel(200),
    request: async ({ w, principal }) => ({ params: { id: (await w.makeUser(w.accountA.id, { [w.a1.id]: 'admin' })).id }, payload: { location: `Set by ${principal}` } }),
  },
  {
    // Making admin of A1 someone also enrolled in A2 would give power over A2's member: account level only.
    route: 'POST /api/admin/membership',
    variant: 'grant admin to a member of A1 and A2',
    expect: accountLevel(200),
    request: async ({ w }) => ({ payload: { user: (await w.makeUser(w.accountA.id, { [w.a1.id]: 'user', [w.a2.id]: 'user' })).id, institution: w.a1.id, role: 'admin' } }),
  },
  {
    route: 'POST /api/admin/membership',
    variant: 'into A2',
    expect: accountLevel(201),
    request: async ({ w }) => ({ payload: { user: (await w.makeUser(w.accountA.id)).id, institution: w.a2.id, role: 'user' } }),
  },

  // ───────────── memberships ─────────────
  {
    // Enrolling a plain user of account A (enrolled nowhere yet) in A1 as a member.
    route: 'POST /api/admin/membership',
    expect: institutionLevel(201),
    request: async ({ w }) => ({ payload: { user: (await w.makeUser(w.accountA.id)).id, institution: w.a1.id, role: 'user' } }),
  },
  {
    route: 'DELETE /api/admin/membership',
    expect: institutionLevel(200),
    request: async ({ w }) => ({ payload: { user: (await w.makeUser(w.accountA.id, { [w.a1.id]: 'user' })).id, institution: w.a1.id } }),
  },
];
