import type { AuthContext } from '../identity/auth-context.js';
import { adminListingScope, visibleAccountFilter, visibleCurrentInstitution, visibleHomeAccount, visibleInstitutionFilter, type AdminListingScope } from '../tenancy/tenancy.policy.js';

/**
 * Which login sessions an admin may list (admin.sessions.read): a superadmin all; an account admin the
 * sessions of users of its account and the sessions opened in its account's institutions, whoever the
 * user (and in institutions it administers elsewhere); an institution admin the sessions opened in
 * (switched to) the institutions it administers. Others 403. A superadmin's sessions (its addresses,
 * browsers and hours) are listed to superadmins only, even when its home account or an institution it
 * switched to is the caller's: only a superadmin administers a superadmin (tenancy.policy), as with its
 * memory (memory.policy).
 */
export function sessionsScope(auth: AuthContext): AdminListingScope {
  return adminListingScope(auth, 'admin.sessions.read');
}

/**
 * What a listed session shows the caller of its user's tenants, as a user record does (tenancy.policy): `account`,
 * the user's home account, only when visibleHomeAccount; `institution`, the one it was opened in (switched to), only
 * when visibleCurrentInstitution (one whose account is unknown, a deleted one, to a superadmin only). Else null: a
 * session listed to B because its user is of B, or because it was opened in B1, never tells B the id of an account
 * or an institution of another tenant.
 */
export function visibleSessionTenancy(
  auth: AuthContext,
  session: { accountId: string; institutionId: string | null; institutionAccountId: string | null },
): { account: string | null; institution: string | null } {
  const { accountId, institutionId, institutionAccountId } = session;
  const institutionVisible =
    institutionId !== null && (institutionAccountId === null ? auth.role === 'superadmin' : visibleCurrentInstitution(auth, { id: institutionId, accountId: institutionAccountId }));
  return { account: visibleHomeAccount(auth, accountId) ? accountId : null, institution: institutionVisible ? institutionId : null };
}

/**
 * The ids of the listing's `account` filter that may select sessions for the caller: tenancy.policy
 * visibleAccountFilter (the accounts visibleHomeAccount holds for; a superadmin keeps all). The filter matches the
 * sessions of users of an account and those opened in its institutions; for an account the caller cannot see, the
 * listing shows neither (account and institution null: visibleSessionTenancy), so its id matches nothing. B's
 * admin filtering by the id of account A learns neither which sessions opened in B1 are of A's users nor which of
 * its users' sessions were opened in A's institutions; only such ids list nothing, a mix lists the visible ones'.
 */
export function sessionsAccountFilter(auth: AuthContext, accountIds: readonly string[] | undefined): string[] | undefined {
  return visibleAccountFilter(auth, accountIds);
}

/**
 * The listing's `institution` filter as it may select sessions for the caller: tenancy.policy visibleInstitutionFilter
 * ([the id] when the caller may see the institution, else []: no session; a superadmin keeps any id). The listing shows
 * such an institution as null (visibleSessionTenancy), so its id must not select sessions either: B's admin filtering
 * by A1 learns not which of its users' sessions were opened in A1, nor A's admin filtering by B1 which of its users'
 * sessions were opened in B1. An institution that no longer exists (sessions keep its id) is shown to superadmins only,
 * and matches for them only. `institution` is the filtered institution as stored, undefined when there is none.
 */
export function sessionsInstitutionFilter(
  auth: AuthContext,
  institutionId: string | undefined,
  institution: { id: string; accountId: string } | undefined,
): string[] | undefined {
  return visibleInstitutionFilter(auth, institutionId, institution);
}
