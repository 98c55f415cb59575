import { sql, type SQL } from 'drizzle-orm';
import { inList } from '../../db/search.js';
import type { AuthContext } from '../identity/auth-context.js';
import { canInInstitution, canInAccount } from '../tenancy/permissions.js';
import { forbidden } from '../../shared/errors.js';

/**
 * Who sees what in the vault (contract §4), decided here and nowhere else.
 *
 * - personal: only its owner.
 * - instance: members of that institution.
 * - account: members of any institution of that account ("account-shared siblings").
 * - is_private: only its owner, whatever the scope.
 * Administrative roles do not widen what a user can read: file contents stay with their audience —
 * with one exception: the account admin (`vault.admin` over the account, its own account) sees the
 * account-scope records of its account even without an enrolment, so that it can moderate what the
 * whole account shares (is_private still keeps a record with its owner).
 * Changing or deleting a record is for its owner, or for an admin with `vault.admin` over its
 * institution (instance scope) or over its whole account (account scope: the account admin; an
 * institution admin administers one institution, not the records the whole account shares).
 */
export type VaultScope = 'personal' | 'instance' | 'account';
export const VAULT_SCOPES: readonly VaultScope[] = ['personal', 'instance', 'account'];

export interface ScopedRecord {
  scope: string;
  ownerUserId: string;
  institutionId: string | null;
  accountId: string;
  isPrivate?: boolean;
}

export function memberInstitutionIds(auth: AuthContext): string[] {
  return [...auth.memberships.keys()];
}

export function memberAccountIds(auth: AuthContext): string[] {
  return [...new Set([...auth.memberships.values()].map((m) => m.accountId))];
}

/** The account whose account-scope records the caller administers without being enrolled there, if any. */
function moderatedAccountId(auth: AuthContext): string | undefined {
  return auth.role === 'accountadmin' && canInAccount(auth, 'vault.admin', auth.accountId) ? auth.accountId : undefined;
}

/** Accounts whose account-scope records the caller sees: those it is enrolled in, and the one it administers. */
export function accountScopeIds(auth: AuthContext): string[] {
  const moderated = moderatedAccountId(auth);
  const ids = memberAccountIds(auth);
  return moderated && !ids.includes(moderated) ? [...ids, moderated] : ids;
}

/**
 * SQL condition: the record (table alias given) is visible to the caller. Use it in EVERY vault query
 * that reads uploads, collections or chunks (through their upload).
 */
export function visibleCondition(auth: AuthContext, alias: string, options: { hasPrivateFlag: boolean }): SQL {
  const col = (name: string) => sql.raw(`${alias}.${name}`);
  const scopes = sql`(
    (${col('scope')} = 'personal' and ${col('owner_user_id')} = ${auth.userId})
    or (${col('scope')} = 'instance' and ${inList(col('institution_id'), memberInstitutionIds(auth))})
    or (${col('scope')} = 'account' and ${inList(col('account_id'), accountScopeIds(auth))})
  )`;
  if (!options.hasPrivateFlag) return scopes;
  return sql`(${scopes} and (${col('is_private')} = false or ${col('owner_user_id')} = ${auth.userId}))`;
}

export function canSee(auth: AuthContext, r: ScopedRecord): boolean {
  if (r.isPrivate && r.ownerUserId !== auth.userId) return false;
  switch (r.scope) {
    case 'personal':
      return r.ownerUserId === auth.userId;
    case 'instance':
      return r.institutionId !== null && auth.memberships.has(r.institutionId);
    case 'account':
      return accountScopeIds(auth).includes(r.accountId);
    default:
      return false;
  }
}

export function canModify(auth: AuthContext, r: ScopedRecord): boolean {
  if (!canSee(auth, r)) return false;
  if (r.ownerUserId === auth.userId) return true;
  if (r.scope === 'instance' && r.institutionId) return canInInstitution(auth, 'vault.admin', { id: r.institutionId, accountId: r.accountId });
  if (r.scope === 'account') return canInAccount(auth, 'vault.admin', r.accountId);
  return false;
}

/** Where a record sits in the vault: its scope and, by scope, its owner, institution or account. */
export type Place = Pick<ScopedRecord, 'scope' | 'ownerUserId' | 'institutionId' | 'accountId'>;

/**
 * The "same place" rule: a file in a collection, and a collection under its parent, share one audience
 * — the same scope and the same owner (personal), institution (instance) or account (account).
 */
export function samePlace(a: Place, b: Place): boolean {
  if (a.scope !== b.scope) return false;
  switch (a.scope) {
    case 'personal':
      return a.ownerUserId === b.ownerUserId;
    case 'instance':
      return a.institutionId !== null && a.institutionId === b.institutionId;
    case 'account':
      return a.accountId === b.accountId;
    default:
      return false;
  }
}

/**
 * Where a new record goes: the scope, the institution (the given one, else the caller's current one)
 * and the account. The caller must be a member of that institution for instance and account scope.
 */
export function placementFor(auth: AuthContext, scope: VaultScope, institution?: string | null): { institutionId: string | null; accountId: string } {
  if (scope === 'personal') return { institutionId: null, accountId: auth.accountId };
  const institutionId = institution ?? auth.institutionId;
  if (!institutionId) throw forbidden('No current institution: pass `institution` or switch to one');
  const membership = auth.memberships.get(institutionId);
  if (!membership) throw forbidden('You are not a member of this institution');
  return { institutionId, accountId: membership.accountId };
}

/** 403 with `message` unless the caller may change the record (see canModify). */
export function assertModify(auth: AuthContext, r: ScopedRecord, message: string): void {
  if (!canModify(auth, r)) throw forbidden(message);
}

/** Only the owner of a record changes whether it is private (an administrator who may modify it may not). */
export function assertPrivacyChange(auth: AuthContext, r: Pick<ScopedRecord, 'ownerUserId'>): void {
  if (r.ownerUserId !== auth.userId) throw forbidden('Only the owner may change is_private');
}

/** An institution that disables uploads for users still lets its vault administrators upload. */
export function assertMayUploadTo(auth: AuthContext, institution: { id: string; accountId: string; disableFileUploadForUser: boolean }): void {
  if (institution.disableFileUploadForUser && !canInInstitution(auth, 'vault.admin', institution)) {
    throw forbidden('File uploads are disabled for users of this institution: only its administrators may upload');
  }
}

/** Listing an institution's shared files needs an (active) enrolment there; returns the institution's account. */
export function assertMemberOf(auth: AuthContext, institutionId: string): { accountId: string } {
  const membership = auth.memberships.get(institutionId);
  if (!membership) throw forbidden('You are not a member of this institution');
  return { accountId: membership.accountId };
}
