import { forbidden } from '../../shared/errors.js';
import type { AuthContext } from './auth-context.js';

/**
 * Who may hold a session, and which institution a session may carry: decided here and nowhere else
 * (the login, the MFA login, the refresh and the per-request auth context all ask these). A user refused
 * by loginRefusal may still end its own live session (POST /api/auth/logout, auth-context
 * resolveSessionToEnd): the refusal keeps users out, and a logout only takes away what it would.
 */

export interface LoginSubject {
  status: string;
  role: string;
}

export interface EnrolmentState {
  status: string;
  accountStatus: string;
}

/** An enrolment counts only while its institution and the institution's account are active. */
export function isActiveEnrolment(e: EnrolmentState): boolean {
  return e.status === 'active' && e.accountStatus === 'active';
}

/**
 * Why a user may not have a session, or null. Refused: a disabled user; a user whose home account is
 * inactive (except a superadmin: it runs the platform, not its home account, and is the one who can
 * reactivate that account); a plain user (global role `user`) who is enrolled somewhere but only in inactive
 * institutions (an institution's members lose access with it). A plain user with no enrolment at all
 * keeps a personal space; account admins and superadmins keep access to reactivate what they run.
 */
export function loginRefusal(user: LoginSubject, accountStatus: string | undefined, enrolments: readonly EnrolmentState[]): string | null {
  if (user.status !== 'active') return 'This user is disabled';
  if (accountStatus !== 'active' && !(user.role === 'superadmin' && accountStatus !== undefined)) return 'The account of this user is inactive';
  if (user.role === 'user' && enrolments.length > 0 && !enrolments.some(isActiveEnrolment)) return 'Every institution of this user is inactive';
  return null;
}

/** A session may switch only to an institution the caller is enrolled in and that is active (403 otherwise). */
export function assertMaySwitchTo(auth: AuthContext, institutionId: string): void {
  if (!auth.memberships.has(institutionId)) throw forbidden('You are not enrolled in this institution, or it is inactive');
}
