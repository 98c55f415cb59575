import { and, eq, or, type SQL } from 'drizzle-orm';
import { settings } from '../../db/schema.js';
import { forbidden, notFound } from '../../shared/errors.js';
import { changesSharing, type SharingRequest } from '../../shared/sharing.js';
import type { AuthContext } from '../identity/auth-context.js';
import { canInInstitution } from '../tenancy/permissions.js';

/**
 * Who may do what with settings (instance variables, contract §7), decided here and nowhere else.
 *
 * "Admin" below is `settings.admin` on the setting's institution: its institution admins, the account
 * admin of its account, a superadmin.
 * - Read: members of the institution and admins; `admin_only` rows only admins; rows with
 *   `institution_shared` false only their creator and admins.
 * - Change or delete: whoever may read it and is an admin, its creator (unless it is admin_only), or
 *   anyone who may read it when `editable_others` is true (unless it is admin_only).
 * - Create: members of the institution and admins; only admins create admin_only rows.
 * A setting the caller may not read is 404; one it may read but not change is 403.
 */
export interface SettingAccessRow {
  institutionId: string;
  institutionAccountId: string;
  userId: string | null;
  adminOnly: boolean;
  institutionShared: boolean;
  editableOthers: boolean;
}

export function isSettingsAdmin(auth: AuthContext, institution: { id: string; accountId: string }): boolean {
  return canInInstitution(auth, 'settings.admin', institution);
}

/** Whether the caller may use the institution's settings at all (member or admin). */
export function seesInstitutionSettings(auth: AuthContext, institution: { id: string; accountId: string }): boolean {
  return auth.memberships.has(institution.id) || isSettingsAdmin(auth, institution);
}

export function canRead(auth: AuthContext, row: SettingAccessRow): boolean {
  const institution = { id: row.institutionId, accountId: row.institutionAccountId };
  if (isSettingsAdmin(auth, institution)) return true;
  if (!auth.memberships.has(row.institutionId) || row.adminOnly) return false;
  return row.institutionShared || row.userId === auth.userId;
}

export function canChange(auth: AuthContext, row: SettingAccessRow): boolean {
  if (!canRead(auth, row)) return false;
  if (isSettingsAdmin(auth, { id: row.institutionId, accountId: row.institutionAccountId })) return true;
  return !row.adminOnly && (row.editableOthers || row.userId === auth.userId);
}

export function assertChange(auth: AuthContext, row: SettingAccessRow): void {
  if (!canRead(auth, row)) throw notFound('Setting');
  if (!canChange(auth, row)) throw forbidden('Only its creator and the admins of the institution may change this setting');
}

/** Creating: the institution must be the caller's; admin_only needs an admin. */
export function assertCreate(auth: AuthContext, institution: { id: string; accountId: string }, adminOnly: boolean): void {
  if (!seesInstitutionSettings(auth, institution)) throw forbidden('You are not a member of this institution');
  if (adminOnly && !isSettingsAdmin(auth, institution)) throw forbidden('Only admins of the institution may create admin_only settings');
}

/** Changing the admin_only flag is for admins only. */
export function assertFlagChange(auth: AuthContext, row: SettingAccessRow): void {
  if (!isSettingsAdmin(auth, { id: row.institutionId, accountId: row.institutionAccountId })) throw forbidden('Only admins of the institution may change admin_only');
}

/**
 * Who sees and who edits a setting (institution_shared, editable_others) is for its creator and the admins
 * of the institution: a member allowed to edit another's shared setting may change its value, not hide it
 * from everyone or lock it. Asking for the values the record already has changes nothing and is let through.
 */
export function assertSharingChange(auth: AuthContext, row: SettingAccessRow, asked: SharingRequest): void {
  if (!changesSharing(asked, row) || row.userId === auth.userId || isSettingsAdmin(auth, { id: row.institutionId, accountId: row.institutionAccountId })) return;
  throw forbidden('Only its creator and the admins of the institution may change institution_shared or editable_others');
}

/** SQL twin of canRead for listing one institution the caller sees: undefined (admins) means every row. */
export function visibleSettingsCondition(auth: AuthContext, institution: { id: string; accountId: string }): SQL | undefined {
  if (isSettingsAdmin(auth, institution)) return undefined;
  return and(eq(settings.adminOnly, false), or(eq(settings.institutionShared, true), eq(settings.userId, auth.userId)));
}
