import type { AuthContext } from '../identity/auth-context.js';
import type { RowScope } from '../tenancy/tenancy.repository.js';
import { listingScope } from '../tenancy/tenancy.policy.js';

/**
 * Which login sessions an admin may list (admin.sessions.read): a superadmin all; an account admin the
 * sessions of users of its account and the sessions opened in its account's institutions, whoever the
 * user (and in institutions it administers elsewhere); an institution admin the sessions opened in
 * (switched to) the institutions it administers. Others 403.
 */
export function sessionsScope(auth: AuthContext): RowScope {
  return listingScope(auth, 'admin.sessions.read');
}
