import type { AuthContext } from '../identity/auth-context.js';
import { assertInstitution } from '../tenancy/tenancy.policy.js';

/**
 * Cloud-services tokens of an institution (spec rule 1: institutions.edit). Storing and revoking both
 * need institutions.edit on the institution: its institution admins, the account admin of its account,
 * superadmins. An institution of an account the caller has nothing to do with is 404, otherwise 403.
 */
export function assertManageCloud(auth: AuthContext, institution: { id: string; accountId: string }): void {
  assertInstitution(auth, 'institutions.edit', institution);
}
