import { forbidden, notFound, validationFailed } from '../../shared/errors.js';
import { adminInstitutionIds, adminScope, canInAccount, canInInstitution, holdsPermission, type GlobalRole, type Permission, type Principal } from './permissions.js';
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

export interface TargetUser {
  id: string;
  accountId: string;
  role: string;
}

function seesUser(p: Principal, user: TargetUser, userMemberships: readonly UserMembershipRow[]): boolean {
  if (seesAccount(p, user.accountId)) return true;
  return userMemberships.some((m) => p.memberships.get(m.institutionId)?.role === 'admin' || canInAccount(p, 'users.read', m.accountId));
}

/**
 * Reading a user: superadmin any; account admin the users of its account and the members of its
 * account's institutions (whatever their home account); institution admin the members of an
 * institution it administers.
 */
export function assertUserRead(p: Principal, user: TargetUser, userMemberships: readonly UserMembershipRow[]): void {
  if (!seesUser(p, user, userMemberships)) throw notFound('User');
  if (p.role === 'superadmin' || canInAccount(p, 'users.read', user.accountId)) return;
  if (userMemberships.some((m) => canInInstitution(p, 'users.read', { id: m.institutionId, accountId: m.accountId }))) return;
  throw forbidden('You do not administer this user');
}

/**
 * Whether the caller holds power over the target user as a whole (password, status, profile, global
 * role, balance, deletion). Taking over a user hands the caller every role the user holds, so:
 * - only a superadmin changes a superadmin;
 * - an account admin changes the users of its account only when every enrolment of the user is in
 *   that account too (a user enrolled in another account, possibly as its admin, is out of reach);
 * - an institution admin (without account-level rights over the user's account) changes only plain
 *   users (global role `user`) of the institutions' account whose EVERY enrolment is in an institution
 *   it administers and none of which is an `admin` enrolment. Enrolling someone who is an admin
 *   elsewhere therefore never gives power over them.
 * Returns null when the caller may, or the reason why not.
 */
function userWriteRefusal(p: Principal, permission: Permission, user: TargetUser, userMemberships: readonly UserMembershipRow[]): string | null {
  if (p.role === 'superadmin') return null;
  if (user.role === 'superadmin') return 'Only a superadmin may change a superadmin';
  if (canInAccount(p, permission, user.accountId)) {
    if (userMemberships.some((m) => m.accountId !== user.accountId)) return 'This user is enrolled in institutions of another account: only a superadmin may change them';
    return null;
  }
  const administered = new Set(adminInstitutionIds(p, permission));
  if (!userMemberships.some((m) => administered.has(m.institutionId))) return `Missing permission ${permission} on this user`;
  if (user.role !== 'user') return 'Institution admins may only change plain users';
  for (const m of userMemberships) {
    if (!administered.has(m.institutionId) || m.accountId !== user.accountId) return 'This user is also enrolled in institutions you do not administer';
    if (m.role === 'admin') return 'This user is an institution admin: only account admins may change them';
  }
  return null;
}

/** Changing a user (edit, credits, delete): see userWriteRefusal; a user the caller cannot see is 404. */
export function assertUserWrite(p: Principal, permission: Permission, user: TargetUser, userMemberships: readonly UserMembershipRow[]): void {
  if (!seesUser(p, user, userMemberships)) throw notFound('User');
  const refusal = userWriteRefusal(p, permission, user, userMemberships);
  if (refusal) throw forbidden(refusal);
}

/**
 * Enrolling a user in an institution, changing or ending the enrolment: memberships.edit on the
 * institution; the user must be visible. Except for a superadmin, a user of another account is never
 * enrolled nor raised (a new enrolment, or `user` → `admin`); an existing enrolment of such a user (made
 * by a superadmin) may still be ended or lowered by those who administer the institution, under the
 * rules below: they keep control over who is in their institution. Account-level admins (of the
 * institution's account) manage any enrolment in it. An institution admin:
 * - may enrol a plain user as a member (`user`), even one enrolled elsewhere: that gives no power
 *   over them (see userWriteRefusal);
 * - may end the plain (`user`) enrolment of a plain user in its institution;
 * - may not change or end the enrolment of a fellow admin of the institution;
 * - may grant `admin` only to a user it has power over as a whole (userWriteRefusal passes).
 * `role` is the requested role (POST), undefined when the enrolment is ended (DELETE).
 */
export function assertMembershipWrite(
  p: Principal,
  institution: { id: string; accountId: string },
  user: TargetUser,
  userMemberships: readonly UserMembershipRow[],
  role?: 'admin' | 'user',
): void {
  assertInstitution(p, 'memberships.edit', institution);
  if (!seesUser(p, user, userMemberships)) throw notFound('User');
  if (p.role === 'superadmin') return;
  const current = userMemberships.find((m) => m.institutionId === institution.id);
  const grants = role !== undefined && (current === undefined || (role === 'admin' && current.role !== 'admin'));
  if (grants && user.accountId !== institution.accountId) throw forbidden('Users of another account cannot be enrolled in this institution');
  if (user.role === 'superadmin') throw forbidden('Only a superadmin may change a superadmin');
  if (canInAccount(p, 'memberships.edit', institution.accountId)) return;
  if (user.role !== 'user') throw forbidden('Institution admins may only change the enrolments of plain users');
  if (current?.role === 'admin') throw forbidden('Only account admins may change or end the enrolment of an institution admin');
  if (role === 'admin') {
    // The user as it would be once enrolled: the caller must hold power over all of it.
    const after: UserMembershipRow[] = current ? [...userMemberships] : [...userMemberships, { userId: user.id, institutionId: institution.id, role: 'user', accountId: institution.accountId }];
    const refusal = userWriteRefusal(p, 'memberships.edit', user, after);
    if (refusal) throw forbidden(`You may not make this user an admin: ${refusal[0]!.toLowerCase()}${refusal.slice(1)}`);
  }
}

/** Whether the caller may see an institution referenced in a request (a missing one is 404 too). */
export function seesInstitution(p: Principal, institution: { id: string; accountId: string }): boolean {
  return seesAccount(p, institution.accountId) || p.memberships.has(institution.id);
}

/**
 * Global roles the caller may hand out to a user of this account: nobody grants more than they hold, and
 * an account admin grants its role only in its own account (in another account where it administers an
 * institution, it is that institution's admin, who hands out plain users only).
 */
export function grantableRoles(p: Principal, accountId: string): readonly GlobalRole[] {
  if (p.role === 'superadmin') return ['user', 'accountadmin', 'superadmin'];
  if (canInAccount(p, 'users.edit', accountId)) return ['user', 'accountadmin'];
  return ['user'];
}

export function assertGrantable(p: Principal, role: GlobalRole, accountId: string): void {
  if (!grantableRoles(p, accountId).includes(role)) throw forbidden(`You may not grant the role ${role}`);
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

/** What an admin listing (sessions, feedbacks, assistants) may return. */
export interface AdminListingScope {
  /** The accounts and institutions whose rows are listed. */
  rows: RowScope;
  /**
   * Whether what superadmins own is listed too (their sessions, their Q&A records with feedback, their
   * personal assistants): only a superadmin administers a superadmin, as with its memory (memory.policy).
   */
  superadmins: boolean;
}

/** The scope of an admin listing under `permission` (403 without it). */
export function adminListingScope(p: Principal, permission: Permission): AdminListingScope {
  return { rows: listingScope(p, permission), superadmins: p.role === 'superadmin' };
}

/** The institutions whose enrolments the caller may see in a user record. */
export function visibleMembership(p: Principal, m: UserMembershipRow): boolean {
  return p.role === 'superadmin' || tenantAccountIds(p).has(m.accountId) || p.memberships.has(m.institutionId);
}

/**
 * Whether a user record shows the caller the user's current institution (else `institution` is null): the
 * same institutions as its enrolments (visibleMembership), so a user of another tenant enrolled in one of
 * the caller's institutions never tells the caller the id of an institution it cannot see.
 */
export function visibleCurrentInstitution(p: Principal, institution: { id: string; accountId: string }): boolean {
  return seesInstitution(p, institution); // the rule of visibleMembership: superadmin, one of its accounts, or enrolled there
}

/**
 * Whether an admin output that carries a user's home account (a user record's `account`, a login session's
 * `account`) shows it to the caller (else null): a superadmin, or one of the caller's accounts (its home account
 * or the account of an institution it is enrolled in: the accounts of visibleMembership). A user of another
 * tenant enrolled in one of the caller's institutions never tells the caller the id of an account it cannot see.
 */
export function visibleHomeAccount(p: Principal, accountId: string): boolean {
  return seesAccount(p, accountId);
}

/**
 * The ids of an admin listing's `account` filter that may select rows for the caller: those visibleHomeAccount
 * holds for (a superadmin keeps all). The filter matches a user's home account, which a record shows the caller
 * only when it may see it; an id it cannot see selects no row it may see as "of that account", so it matches
 * nothing: B's admin filtering by the id of account A must not learn which of the users it lists (A's users
 * enrolled in B's institutions) are of A. undefined (no filter) stays undefined; a filter of invisible ids only
 * is [] (no row), and a mix keeps the visible ones.
 */
export function visibleAccountFilter(p: Principal, accountIds: readonly string[] | undefined): string[] | undefined {
  return accountIds?.filter((id) => visibleHomeAccount(p, id));
}

/**
 * The `institution` filter of an admin listing as it may select rows for the caller: [the id] when the caller may
 * see that institution, by the rule of the records (visibleCurrentInstitution, visibleMembership: one of its
 * accounts, or enrolled there), else [] (no row). `institution` is the filtered institution as stored, undefined when
 * there is none. A listing shows another tenant's institution as null (or not at all); its id selecting rows inside
 * the caller's scope would tell them apart anyway: B's admin filtering by A1 must not learn which of its users are
 * enrolled in A1, nor which of its users' sessions were opened there. A superadmin keeps any id, one of an
 * institution that no longer exists too (it is shown such ids: sessions.policy visibleSessionTenancy); for anyone
 * else an unknown id matches nothing. undefined (no filter) stays undefined.
 */
export function visibleInstitutionFilter(
  p: Principal,
  institutionId: string | undefined,
  institution: { id: string; accountId: string } | undefined,
): string[] | undefined {
  if (institutionId === undefined) return undefined;
  if (p.role === 'superadmin') return [institutionId];
  return institution?.id === institutionId && visibleCurrentInstitution(p, institution) ? [institutionId] : [];
}

// ───────────── decisions the service used to take itself (moved here: services ask, policies decide) ─────────────

/** Creating an account: superadmins only (accounts.create). */
export function assertAccountCreate(p: Principal): void {
  if (!holdsPermission(p, 'accounts.create')) throw forbidden('Missing permission accounts.create');
}

/** Editing an account: accounts.edit on it; changing its status (active/inactive) needs accounts.delete (superadmin). */
export function assertAccountUpdate(p: Principal, account: { id: string; status: string }, input: { status?: string }): void {
  assertAccount(p, 'accounts.edit', account.id);
  if (input.status !== undefined && input.status !== account.status && !canInAccount(p, 'accounts.delete', account.id)) {
    throw forbidden('Only a superadmin may change the status of an account');
  }
}

/** Deleting an account: accounts.delete, and never the account the caller belongs to. */
export function assertAccountDelete(p: Principal, account: { id: string }): void {
  assertAccount(p, 'accounts.delete', account.id);
  if (account.id === p.accountId) throw forbidden('You cannot delete the account you belong to');
}

/** Credits come into existence only by a superadmin's act (top-up, opening balance, correction). */
export function assertMint(p: Principal): void {
  if (p.role !== 'superadmin' || !holdsPermission(p, 'credits.mint')) {
    throw forbidden('Only a superadmin may create or remove credits; account admins move the credits they hold with POST /api/admin/credits/transfer');
  }
}

/** Creating an institution: institutions.create in the account; an opening balance is minting. */
export function assertInstitutionCreate(p: Principal, accountId: string, openingCredits: number | undefined): void {
  assertAccount(p, 'institutions.create', accountId);
  if (openingCredits) assertMint(p);
}

/**
 * Editing an institution: institutions.edit on it. The account-level fields (lifecycle, billing, cost
 * limits) are reserved to account-level admins; `changed` lists the fields whose value would change.
 */
export function assertInstitutionPatch(p: Principal, institution: { id: string; accountId: string }, changed: readonly string[], accountLevelFields: readonly string[]): void {
  assertInstitution(p, 'institutions.edit', institution);
  if (canInAccount(p, 'institutions.edit', institution.accountId)) return;
  const touched = changed.filter((f) => accountLevelFields.includes(f));
  if (touched.length > 0) throw forbidden(`Only account admins may change ${touched.join(', ')}`);
}

export interface NewUserRequest {
  account: { id: string };
  role: GlobalRole;
  institutions: ReadonlyArray<{ id: string; accountId: string }>;
  openingCredits?: number;
}

/**
 * Creating a user. The account and each listed institution must be visible (404). The role must be
 * grantable. Except for a superadmin, every institution belongs to the user's account (400 naming
 * them). Without users.create on the account (institution admins), the user must be
 * enrolled in at least one institution and only in institutions the caller administers. An opening
 * balance is minting (superadmins only).
 */
export function assertUserCreate(p: Principal, req: NewUserRequest): void {
  if (!seesAccount(p, req.account.id)) throw notFound('Account');
  assertGrantable(p, req.role, req.account.id);
  for (const inst of req.institutions) if (!seesInstitution(p, inst)) throw notFound('Institution');
  const foreign = foreignInstitutions(p, req.account.id, req.institutions);
  if (foreign.length > 0) {
    throw validationFailed('Every institution must belong to the account of the user', foreign.map((id) => ({ field: 'institutions', message: `institution ${id} belongs to another account` })));
  }
  if (!canInAccount(p, 'users.create', req.account.id)) {
    if (req.institutions.length === 0) throw forbidden('Institution admins must enrol the new user in an institution they administer');
    for (const inst of req.institutions) {
      if (!canInInstitution(p, 'users.create', inst)) throw forbidden('You may only enrol new users in institutions you administer');
    }
  }
  if (req.openingCredits) assertMint(p);
}

/** Institutions of a new user that are outside its account (allowed to superadmins only). */
export function foreignInstitutions(p: Principal, accountId: string, institutions: ReadonlyArray<{ id: string; accountId: string }>): string[] {
  if (p.role === 'superadmin') return [];
  return institutions.filter((i) => i.accountId !== accountId).map((i) => i.id);
}

/** Deleting a user: users.delete with the reach of userWriteRefusal, and never oneself. */
export function assertUserDelete(p: Principal, user: TargetUser, userMemberships: readonly UserMembershipRow[]): void {
  assertUserWrite(p, 'users.delete', user, userMemberships);
  if (user.id === p.userId) throw forbidden('You cannot delete yourself');
}

/**
 * Changing a user (PATCH /api/admin/user/{id}): users.edit with the reach of userWriteRefusal, and nobody
 * disables themselves (the same lock-out as deleting oneself: every session ends, no login).
 */
export function assertUserUpdate(p: Principal, user: TargetUser, userMemberships: readonly UserMembershipRow[], change: { status?: string }): void {
  assertUserWrite(p, 'users.edit', user, userMemberships);
  if (user.id === p.userId && change.status === 'disabled') throw forbidden('You cannot disable yourself');
}

/** Whether a user change may take a superadmin away (a new role below superadmin, or disabling): see assertSuperadminRemains. */
export function mayRemoveSuperadmin(change: { role?: string; status?: string }): boolean {
  return (change.role !== undefined && change.role !== 'superadmin') || change.status === 'disabled';
}

/**
 * The platform always keeps an active superadmin: it alone creates accounts, mints credits and changes a
 * superadmin. `active` are the active superadmins, read and locked in the transaction of the change (so
 * two concurrent changes cannot each leave the other as the last one); `leaving` names what the change
 * takes away (a user demoted, disabled or deleted; an account deleted with its users). 403 when every
 * active superadmin would go.
 */
export function assertSuperadminRemains(active: ReadonlyArray<{ id: string; accountId: string }>, leaving: { userId?: string; accountId?: string }): void {
  const goes = (s: { id: string; accountId: string }) => s.id === leaving.userId || s.accountId === leaving.accountId;
  if (active.some(goes) && active.every(goes)) throw forbidden('The platform must keep an active superadmin: this change would leave none');
}

/**
 * Moving credits (POST /api/admin/credits/transfer): credits.transfer (account admins, superadmins);
 * each side must be a balance the caller holds power over: an institution with institutions.credits
 * (its account's admin) or a user with users.credits and the reach of PATCH /api/admin/user/{id}.
 * Invisible balances are 404. Both sides must belong to one account (checked by the caller of
 * assertTransferSides, which knows the accounts).
 */
export function assertTransfer(p: Principal): void {
  if (!holdsPermission(p, 'credits.transfer')) throw forbidden('Missing permission credits.transfer');
}

export type TransferSide =
  | { kind: 'institution'; institution: { id: string; accountId: string } }
  | { kind: 'user'; user: TargetUser; memberships: readonly UserMembershipRow[] };

export function assertTransferSide(p: Principal, side: TransferSide): void {
  if (side.kind === 'institution') assertInstitution(p, 'institutions.credits', side.institution);
  else assertUserWrite(p, 'users.credits', side.user, side.memberships);
}

/**
 * Whether refused e-mails count against the caller (row 9 of issue 7): every admin but a superadmin,
 * who sees every tenant anyway. After a few refusals such an admin may create no user until the window
 * ends, whatever the address, so "this address is taken somewhere" cannot be harvested.
 */
export function limitsEmailProbes(p: Principal): boolean {
  return p.role !== 'superadmin';
}
