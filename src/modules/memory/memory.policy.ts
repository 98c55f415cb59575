import { forbidden, notFound } from '../../shared/errors.js';
import type { AuthContext } from '../identity/auth-context.js';
import { canInAccount, canInInstitution, type Permission } from '../tenancy/permissions.js';
import { assertInstitution } from '../tenancy/tenancy.policy.js';

/**
 * Who may do what with memory parameters (contract §7), decided here and nowhere else.
 *
 * - A personal row (shared false) is read and changed by its author only.
 * - A shared row belongs to one institution: its members read it; its author and the admins of that
 *   institution (admin.memory.delete there: institution admin, account admin of its account,
 *   superadmin) change it. Only the author turns sharing on or off.
 * - Administration (listings and bulk deletes of another user's rows): a shared row needs the
 *   permission on its institution; a personal row needs it on the author's home account as a whole
 *   (account admin of that account, superadmin): institution admins never see personal rows.
 */
export const MEMORY_READ: Permission = 'admin.memory.read';
export const MEMORY_DELETE: Permission = 'admin.memory.delete';

export interface MemoryAccessRow {
  authorUserId: string;
  shared: boolean;
  institutionId: string | null;
  /** Account of the row's institution (shared rows). */
  institutionAccountId: string | null;
}

export function isAuthor(auth: AuthContext, row: MemoryAccessRow): boolean {
  return row.authorUserId === auth.userId;
}

/**
 * Members of its institution read a shared row (GET /api/user/memory lists the caller's own institutions). Administrative
 * roles do not widen what one reads in user spaces; what an admin who is not a member (account admin, superadmin enrolled
 * nowhere) may do with the rows of institutions it administers is canEdit's and the admin memory routes'.
 */
export function canRead(auth: AuthContext, row: MemoryAccessRow): boolean {
  if (isAuthor(auth, row) && !row.shared) return true;
  return row.shared && row.institutionId !== null && auth.memberships.has(row.institutionId);
}

/**
 * A personal row: its author. A shared row: its author while a member of its institution, and that institution's admins
 * (admin.memory.delete there: its institution admin, the account admin of its account, a superadmin), enrolled in it or
 * not (contract §7: "the author and that institution's admins may edit them"; §2: an account admin administers the
 * account's institutions). The admin listings' `editable` is this.
 */
export function canEdit(auth: AuthContext, row: MemoryAccessRow): boolean {
  if (!row.shared) return isAuthor(auth, row);
  if (row.institutionId === null) return false;
  if (isAuthor(auth, row) && auth.memberships.has(row.institutionId)) return true;
  return canInInstitution(auth, MEMORY_DELETE, { id: row.institutionId, accountId: row.institutionAccountId ?? '' });
}

/** 404 when the caller can neither read nor change the row (not yours, not shared with you, not administered by you), 403 when it may read but not change it. */
export function assertEdit(auth: AuthContext, row: MemoryAccessRow): void {
  if (canEdit(auth, row)) return;
  if (!canRead(auth, row)) throw notFound('Memory parameter');
  throw forbidden('Only the author and the admins of its institution may change this memory parameter');
}

export function assertChangeSharing(auth: AuthContext, row: MemoryAccessRow): void {
  if (!isAuthor(auth, row)) throw forbidden('Only the author may change whether a memory parameter is shared');
}

/** Where a new or re-shared row goes: the given institution, else the current one; the caller must be a member. */
export function sharedPlacement(auth: AuthContext, institution: string | undefined): string {
  const institutionId = institution ?? auth.institutionId;
  if (!institutionId) throw forbidden('No current institution: pass `institution` or switch to one to share a memory parameter');
  if (!auth.memberships.has(institutionId)) throw forbidden('You are not a member of this institution');
  return institutionId;
}

// ───────────── administration ─────────────

export interface TargetUser {
  id: string;
  accountId: string;
  role: string;
}

/**
 * The admin memory routes of a user: an account the caller has nothing to do with is 404; a user it
 * can see but administers in no way (neither their home account nor one of their institutions, as the
 * institution's admin or the account admin of its account) is 403, and so is a superadmin for anyone but a
 * superadmin. Each row is then checked by adminMay.
 */
export function assertAdministersUser(auth: AuthContext, permission: Permission, user: TargetUser, userInstitutions: ReadonlyArray<{ id: string; accountId: string }>): void {
  const sees =
    auth.role === 'superadmin' ||
    auth.accountId === user.accountId ||
    [...auth.memberships.values()].some((m) => m.accountId === user.accountId) ||
    userInstitutions.some((i) => auth.memberships.has(i.id) || auth.accountId === i.accountId);
  if (!sees) throw notFound('User');
  // as everywhere else in administration (tenancy.policy): a superadmin's data is for superadmins
  if (user.role === 'superadmin' && auth.role !== 'superadmin') throw forbidden("Only a superadmin may administer a superadmin's memory");
  if (canInAccount(auth, permission, user.accountId)) return;
  if (!userInstitutions.some((i) => canInInstitution(auth, permission, i))) throw forbidden(`Missing permission ${permission} over this user`);
}

/** Per row: whether an administrator may read (MEMORY_READ) or delete (MEMORY_DELETE) another user's row. */
export function adminMay(auth: AuthContext, permission: Permission, row: MemoryAccessRow, authorAccountId: string): boolean {
  if (row.shared && row.institutionId) return canInInstitution(auth, permission, { id: row.institutionId, accountId: row.institutionAccountId ?? '' });
  return canInAccount(auth, permission, authorAccountId);
}

/** The admin routes of an institution's shared memory: 404 when the caller cannot see it, 403 without the permission there. */
export function assertAdministersInstitution(auth: AuthContext, permission: Permission, institution: { id: string; accountId: string }): void {
  assertInstitution(auth, permission, institution);
}
