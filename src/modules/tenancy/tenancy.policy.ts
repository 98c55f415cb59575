import { forbidden, notFound } from '../../shared/errors.js';
import { adminInstitutionIds, adminScope, canInAccount, canInInstitution, type GlobalRole, type Permission, type Principal } from './permissions.js';
import type { RowScope, UserMembershipRow } from './tenancy.repository.js';

/**
 * Who may do what in the admin management routes (contract §2), decided here and nowhere else.
 *
 * The tenant boundary is the account. A record of an account the caller has nothing to do with is
 * "not found" (404: other tenants never learn what exists). A record inside one of the caller's
 * accounts (its home account, or the account of an institution it is enrolled in) that the caller
 * may not act on is "forbidden" (403).
 */

/** Accounts the caller belongs to: its home account and the accounts of its enrolments. */
export function tenantAccountIds(p: Principal): Set<string> {
  const ids = new Set<string>([p.accountId]);
  for (const m of p.memberships.values()) ids.add(m.accountId);
  return ids;
}

export function seesAccount(p: Principal, accountId: string): boolean {
  return p.role === 'superadmin' || tenantAccountIds(p).has(accountId);
}

/** Passes when the caller may exercise `permission` on the account as a whole; 404 / 403 otherwise. */
export function assertAccount(p: Principal, permission: Permission, accountId: string, what = 'Account'): void {
  if (!seesAccount(p, accountId)) throw notFound(what);
  if (!canInAccount(p, permission, accountId)) throw forbidden(`Missing permission ${permission} on this account`);
}

/** Passes when the caller may exercise `permission` on the institution; 404 / 403 otherwise. */
export function assertInstitution(p: Principal, permission: Permission, institution: { id: string; accountId: string }): void {
  if (!seesInstitution(p, institution)) throw notFound('Institution');
  if (!canInInstitution(p, permission, institution)) throw forbidden(`Missing permission ${permission} on this institution`);
}

/** Whether the caller may change the account-level fields of an institution (limits, billing, status). */
export function canEditAccountLevelFields(p: Principal, institution: { accountId: string }): boolean {
  return canInAccount(p, 'institutions.edit', institution.accountId);
}

export interface TargetUser {
  id: string;
  accountId: string;
  role: string;
}

function seesUser(p: Principal, user: TargetUser, userMemberships: readonly UserMembershipRow[]): boolean {
  if (seesAccount(p, user.accountId)) return true;
  return userMemberships.some((m) => p.memberships.get(m.institutionId)?.role === 'admin');
}

/**
 * Reading a user: superadmin any; account admin the users of its account; institution admin the
 * members of an institution it administers.
 */
export function assertUserRead(p: Principal, user: TargetUser, userMemberships: readonly UserMembershipRow[]): void {
  if (!seesUser(p, user, userMemberships)) throw notFound('User');
  if (p.role === 'superadmin' || canInAccount(p, 'users.read', user.accountId)) return;
  const administered = new Set(adminInstitutionIds(p, 'users.read'));
  if (userMemberships.some((m) => administered.has(m.institutionId))) return;
  throw forbidden('You do not administer this user');
}

/**
 * Changing a user (edit, credits, delete, memberships): as for reading, and besides
 * - only a superadmin changes a superadmin;
 * - an institution admin changes only plain users (global role `user`) of its own account who are
 *   members of an institution it administers.
 */
export function assertUserWrite(p: Principal, permission: Permission, user: TargetUser, userMemberships: readonly UserMembershipRow[]): void {
  if (!seesUser(p, user, userMemberships)) throw notFound('User');
  if (p.role === 'superadmin') return;
  if (user.role === 'superadmin') throw forbidden('Only a superadmin may change a superadmin');
  if (canInAccount(p, permission, user.accountId)) return;
  const administered = new Set(adminInstitutionIds(p, permission));
  const viaInstitution = userMemberships.some((m) => administered.has(m.institutionId) && m.accountId === user.accountId);
  if (viaInstitution && user.role === 'user') return;
  if (viaInstitution) throw forbidden('Institution admins may only change plain users');
  throw forbidden(`Missing permission ${permission} on this user`);
}

/**
 * Enrolling a user in an institution, changing or ending the enrolment: memberships.edit on the
 * institution; the user must be visible; except for a superadmin, the user must belong to the
 * institution's account, and only account-level admins touch the enrolments of admins.
 */
export function assertMembershipWrite(
  p: Principal,
  institution: { id: string; accountId: string },
  user: TargetUser,
  userMemberships: readonly UserMembershipRow[],
): void {
  assertInstitution(p, 'memberships.edit', institution);
  if (!seesUser(p, user, userMemberships)) throw notFound('User');
  if (p.role === 'superadmin') return;
  if (user.accountId !== institution.accountId) throw forbidden('Users of another account cannot be enrolled in this institution');
  if (user.role === 'superadmin') throw forbidden('Only a superadmin may change a superadmin');
  if (user.role !== 'user' && !canInAccount(p, 'memberships.edit', institution.accountId)) throw forbidden('Institution admins may only change the enrolments of plain users');
}

/** Whether the caller may see an institution referenced in a request (a missing one is 404 too). */
export function seesInstitution(p: Principal, institution: { id: string; accountId: string }): boolean {
  return seesAccount(p, institution.accountId) || p.memberships.has(institution.id);
}

/** Global roles the caller may hand out: nobody grants more than they hold. */
export function grantableRoles(p: Principal): readonly GlobalRole[] {
  if (p.role === 'superadmin') return ['user', 'accountadmin', 'superadmin'];
  if (p.role === 'accountadmin') return ['user', 'accountadmin'];
  return ['user'];
}

export function assertGrantable(p: Principal, role: GlobalRole): void {
  if (!grantableRoles(p).includes(role)) throw forbidden(`You may not grant the role ${role}`);
}

/**
 * Rows an admin listing may return, or 403 when the caller may list nothing with this permission.
 * Superadmin: all; account admin: its account (plus institutions it administers elsewhere);
 * institution admin: the institutions it administers.
 */
export function listingScope(p: Principal, permission: Permission): RowScope {
  const scope = adminScope(p, permission);
  if (!scope) throw forbidden(`Missing permission ${permission}`);
  if (scope.kind === 'all') return { all: true };
  if (scope.kind === 'account') return { all: false, accountIds: [scope.accountId], institutionIds: scope.institutionIds };
  return { all: false, accountIds: [], institutionIds: scope.institutionIds };
}

/** The institutions whose enrolments the caller may see in a user record. */
export function visibleMembership(p: Principal, m: UserMembershipRow): boolean {
  return p.role === 'superadmin' || tenantAccountIds(p).has(m.accountId) || p.memberships.has(m.institutionId);
}
