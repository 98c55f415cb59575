/**
 * Rows of the admin sessions listing (rest engineer, issue 10): every admin lists the sessions of what
 * it administers; a plain user is 403. The leak check proves an admin of account B never sees a
 * session of a user of account A.
 */
import assert from 'node:assert/strict';
import { authed, type Row } from './fixture.js';

export const rows: Row[] = [
  {
    route: 'POST /api/admin/sessions',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 }),
    request: () => ({ payload: { pageSize: 5000 } }),
    check: (res, { w, principal }) => {
      const data = res.json().data as Array<{ account: string; institution: string | null; user: { _id: string } }>;
      if (principal === 'otherAccountAdmin') assert.ok(data.every((s) => s.account === w.accountB.id));
      if (principal === 'accountAdmin') assert.ok(data.length > 0 && data.every((s) => s.account === w.accountA.id));
      if (principal === 'institutionAdmin') assert.ok(data.some((s) => s.user._id === w.users.member.id) && data.every((s) => s.institution === w.a1.id));
      if (principal === 'superadmin') assert.ok(data.some((s) => s.account === w.accountB.id) && data.some((s) => s.account === w.accountA.id));
    },
  },
];
