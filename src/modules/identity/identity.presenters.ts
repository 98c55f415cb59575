import { Type } from '@fastify/type-provider-typebox';
import { Nullable } from '../../shared/schemas.js';
import type { UserRow } from './identity.repository.js';

export const UserSchema = Type.Object(
  {
    _id: Type.String(),
    email: Type.String(),
    fname: Type.String(),
    lname: Type.String(),
    location: Type.String(),
    timezone: Type.String(),
    role: Type.String({ description: 'superadmin | accountadmin | user (institution roles are on memberships)' }),
    status: Type.String(),
    account: Type.String(),
    institution: Nullable(Type.String({ description: 'Current institution id' })),
    credits: Type.Number(),
    creditsUsed: Type.Number(),
    mfaEnabled: Type.Boolean({ description: 'true once MFA is requested (pending) or enrolled' }),
    mfaPending: Type.Boolean({ description: 'MFA requested, code not yet verified' }),
    created: Type.String({ format: 'date-time' }),
    lastLoginAt: Nullable(Type.String({ format: 'date-time' })),
  },
  { $id: 'User' },
);

/**
 * Presentations by row object: GET /api/user/me presents the auth cache's row, the same object until an
 * invalidation replaces it, so its dates are formatted once and not on every request. Rows are never
 * changed in place (a write reads a new row).
 */
const presentedUsers = new WeakMap<UserRow, ReturnType<typeof presentUserRow>>();

export function presentUser(u: UserRow) {
  let presented = presentedUsers.get(u);
  if (!presented) presentedUsers.set(u, (presented = presentUserRow(u)));
  return presented;
}

function presentUserRow(u: UserRow) {
  return {
    _id: u.id,
    email: u.email,
    fname: u.fname,
    lname: u.lname,
    location: u.location,
    timezone: u.timezone,
    role: u.role,
    status: u.status,
    account: u.accountId,
    institution: u.currentInstitutionId,
    credits: Number(u.credits),
    creditsUsed: Number(u.creditsUsed),
    mfaEnabled: u.mfaState !== 'off',
    mfaPending: u.mfaState === 'pending',
    created: u.createdAt.toISOString(),
    lastLoginAt: u.lastLoginAt ? u.lastLoginAt.toISOString() : null,
  };
}
