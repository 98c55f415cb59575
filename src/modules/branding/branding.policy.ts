import type { AuthContext } from '../identity/auth-context.js';
import { canInInstitution } from '../tenancy/permissions.js';

/**
 * Context lookup (contract §7): an anonymous caller gets the public projection of each institution;
 * a member of the institution, or an admin of it (institution admin, account admin of its account,
 * superadmin), gets the full record. Decided per institution.
 */
export function seesFullInstitution(auth: AuthContext | null, institution: { id: string; accountId: string }): boolean {
  if (!auth) return false;
  return auth.memberships.has(institution.id) || canInInstitution(auth, 'institutions.read', institution);
}
