import { forbidden, notFound } from '../../shared/errors.js';
import type { AuthContext } from '../identity/auth-context.js';
import { canInAccount, holdsPermission } from '../tenancy/permissions.js';
import { seesAccount } from '../tenancy/tenancy.policy.js';

/**
 * SSO providers belong to an account (contract §7), decided here and nowhere else.
 * - Manage (create, change, delete): `sso.manage` on the account: its account admin, superadmins.
 * - Read and test: `sso.test`: the above, and the institution admins of institutions of that account.
 * A provider of an account the caller has nothing to do with is 404; one it sees but may not act on is 403.
 */
export function canTestInAccount(auth: AuthContext, accountId: string): boolean {
  if (canInAccount(auth, 'sso.test', accountId)) return true;
  return [...auth.memberships.values()].some((m) => m.role === 'admin' && m.accountId === accountId) && holdsPermission(auth, 'sso.test');
}

export function assertManage(auth: AuthContext, accountId: string): void {
  if (!seesAccount(auth, accountId)) throw notFound('SSO provider');
  if (!canInAccount(auth, 'sso.manage', accountId)) throw forbidden('Missing permission sso.manage on this account');
}

export function assertTest(auth: AuthContext, accountId: string): void {
  if (!seesAccount(auth, accountId)) throw notFound('SSO provider');
  if (!canTestInAccount(auth, accountId)) throw forbidden('Missing permission sso.test on this account');
}

/** Accounts whose providers the caller may list; null: every account (superadmin). */
export function listableAccountIds(auth: AuthContext): string[] | null {
  if (auth.role === 'superadmin') return null;
  const ids = new Set<string>();
  if (canInAccount(auth, 'sso.test', auth.accountId)) ids.add(auth.accountId);
  for (const m of auth.memberships.values()) if (m.role === 'admin' && canTestInAccount(auth, m.accountId)) ids.add(m.accountId);
  if (ids.size === 0) throw forbidden('Missing permission sso.test');
  return [...ids];
}

/** The account of a new provider: the given one, else the caller's home account. */
export function accountForNewProvider(auth: AuthContext, account: string | undefined): string {
  const accountId = account ?? auth.accountId;
  assertManage(auth, accountId);
  return accountId;
}
