/** Rows of the identity module: login, refresh, logout, the current user, enrolments, switch. */
import assert from 'node:assert/strict';
import { PASSWORD } from '../support/app.js';
import { authed, everyone, ownRecords, type Row } from './fixture.js';

export const rows: Row[] = [
  {
    // Public: the token sent along (good or bad) plays no part.
    route: 'POST /api/auth/login',
    expect: everyone(200),
    noLeakCheck: 'logs in as the member whoever calls: the answer is the member\'s own',
    request: ({ w }) => ({ payload: { email: w.users.member.email, password: PASSWORD } }),
    check: (res) => assert.equal(typeof res.json().accessToken, 'string'),
  },
  {
    route: 'POST /api/auth/refresh',
    expect: everyone(200),
    noLeakCheck: 'refreshes a session of the member whoever calls: the answer is the member\'s own',
    request: async ({ w }) => ({ payload: { refreshToken: (await w.sessionFor('member')).refreshToken } }),
  },
  {
    // Each cell logs out a session of its own, so the principal's usual token stays valid.
    route: 'POST /api/auth/logout',
    expect: ownRecords(200),
    request: async ({ w, principal }) => (['anonymous', 'garbage', 'expired', 'revoked'].includes(principal) ? {} : { token: (await w.sessionFor(principal)).accessToken }),
  },
  {
    route: 'GET /api/user/me',
    expect: ownRecords(200),
    request: () => ({}),
    check: (res, { w, principal }) => assert.equal(res.json().data._id, w.users[principal as keyof typeof w.users].id),
  },
  {
    route: 'PATCH /api/user/me',
    expect: ownRecords(200),
    request: ({ principal }) => ({ payload: { lname: `Edited by ${principal}` } }),
  },
  {
    route: 'GET /api/user/institutions',
    expect: ownRecords(200),
    request: () => ({}),
  },
  {
    // Switching into A1: only its members; a refusal never says whether A1 exists (403 for any id).
    route: 'POST /api/user/institution/switch',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 200, institutionAdmin: 200, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 403 }),
    request: ({ w }) => ({ payload: { institution: w.a1.id } }),
    check: (res) => {
      const body = res.json();
      assert.equal(typeof body.accessToken, 'string');
      assert.equal(body.refreshToken, undefined, 'switch returned a refresh token');
    },
  },
];
