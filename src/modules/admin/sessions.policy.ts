import type { AuthContext } from '../identity/auth-context.js';
import { adminListingScope, type AdminListingScope } from '../tenancy/tenancy.policy.js';

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
