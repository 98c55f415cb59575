/** Rows of the MFA module: enrolment, verification, MFA login, trusted devices. */
import { everyone, ownRecords, authed, type Row } from './fixture.js';
import { newId } from '../../src/shared/ids.js';

export const rows: Row[] = [
  {
    // Acts on the caller only; nobody in the world has an MFA enrolment pending: 409.
    route: 'POST /api/user/me/mfa-enroll',
    expect: ownRecords(409),
    request: () => ({}),
  },
  {
    route: 'POST /api/user/me/mfa-verify',
    expect: ownRecords(409),
    request: () => ({ payload: { challengeId: newId(), code: '123456' } }),
  },
  {
    // Public second step of a login: an unknown challenge is 401 whoever calls.
    route: 'POST /api/auth/login/mfa',
    expect: everyone(401),
    request: () => ({ payload: { challengeId: newId(), code: '123456' } }),
  },
  {
    route: 'GET /api/user/me/trusted-devices',
    expect: ownRecords(200),
    request: () => ({}),
  },
  {
    // A device of the member: only the member revokes it; to anyone else it does not exist.
    route: 'DELETE /api/user/me/trusted-devices/:id',
    expect: authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: 200, institutionAdmin: 404, accountAdmin: 404, otherAccountAdmin: 404, superadmin: 404 }),
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await w.makeDevice(w.users.member.id)).id : w.records.deviceOfMember.id } }),
  },
];
