import { sql, type SQL } from 'drizzle-orm';
import { inList } from '../../db/search.js';
import { forbidden, notFound } from '../../shared/errors.js';
import { changesSharing, type SharingRequest } from '../../shared/sharing.js';
import type { AuthContext } from '../identity/auth-context.js';
import { canInAccount, canInInstitution, type Principal } from '../tenancy/permissions.js';
import { adminListingScope, seesInstitution, type AdminListingScope } from '../tenancy/tenancy.policy.js';

/**
 * Who may do what with assistants and history records, decided here and nowhere else.
 *
 * Assistants (contract §6 and the spec's Assistant table):
 * - the owner sees, uses, edits and deletes its own assistants (personal ones have no institution);
 * - an admin of the assistant's institution (institution admin, the account admin of its account, a
 *   superadmin) sees, edits and deletes every assistant of the institution, and alone may set
 *   `admin_only` or create system assistants (no owner);
 * - a member of the institution sees and uses: system assistants and `institution_shared` ones,
 *   except `admin_only` ones; and edits those with `editable_others`;
 * - `disableAssistantsForUser` of the institution: plain members neither create nor use assistants
 *   there; `assistantsDisabled` lists assistants nobody may use there;
 * - anyone else: 404 (never learns it exists).
 * History records belong to the user who asked: only they read or change them. Admin listings
 * (feedbacks, assistants) are scoped by the tenancy listing scope (superadmin all, account admin its
 * account, institution admin its institutions).
 */
export interface AssistantAccess {
  id: string;
  accountId: string;
  institutionId: string | null;
  ownerUserId: string | null;
  adminOnly: boolean;
  institutionShared: boolean;
  editableOthers: boolean;
}

export interface InstitutionSwitches {
  id: string;
  accountId: string;
  disableAssistantsForUser: boolean;
  assistantsDisabled: string[];
}

export function administersInstitution(p: Principal, institution: { id: string; accountId: string }): boolean {
  return canInInstitution(p, 'institutions.edit', institution);
}

function adminOf(p: Principal, a: AssistantAccess): boolean {
  return a.institutionId !== null && administersInstitution(p, { id: a.institutionId, accountId: a.accountId });
}

export function canSeeAssistant(p: Principal, a: AssistantAccess): boolean {
  if (a.ownerUserId === p.userId) return true;
  if (a.institutionId === null) return false;
  if (adminOf(p, a)) return true;
  if (!p.memberships.has(a.institutionId) || a.adminOnly) return false;
  return a.institutionShared || a.ownerUserId === null;
}

export function assertSeeAssistant(p: Principal, a: AssistantAccess | undefined): asserts a is AssistantAccess {
  if (!a || !canSeeAssistant(p, a)) throw notFound('Assistant');
}

export function assertEditAssistant(p: Principal, a: AssistantAccess): void {
  assertSeeAssistant(p, a);
  if (a.ownerUserId === p.userId || adminOf(p, a) || a.editableOthers) return;
  throw forbidden('Only the owner of this assistant or an admin of its institution may change it');
}

/**
 * Who sees and who edits an assistant (institution_shared, editable_others) is for its owner and the admins
 * of its institution: a member allowed to edit another's shared assistant may change what it does, not hide
 * it from everyone or lock it. Asking for the values the record already has changes nothing and is let through.
 */
export function assertSharingChange(p: Principal, a: AssistantAccess, asked: SharingRequest): void {
  if (!changesSharing(asked, a) || a.ownerUserId === p.userId || adminOf(p, a)) return;
  throw forbidden('Only the owner of this assistant or an admin of its institution may change institution_shared or editable_others');
}

export function assertDeleteAssistant(p: Principal, a: AssistantAccess): void {
  assertSeeAssistant(p, a);
  if (a.ownerUserId === p.userId || adminOf(p, a)) return;
  throw forbidden('Only the owner of this assistant or an admin of its institution may delete it');
}

/** Setting admin_only, or owning nothing (a system assistant), is for admins of the institution. */
export function assertAdminFlags(p: Principal, institution: { id: string; accountId: string } | null, flags: { adminOnly?: boolean; system?: boolean }): void {
  if (!flags.adminOnly && !flags.system) return;
  if (!institution || !administersInstitution(p, institution)) throw forbidden('Only admins of the institution may create system or admin-only assistants');
}

/** Creating an assistant in an institution: a member, unless the institution disables assistants for plain users. */
export function assertCreateIn(p: Principal, institution: InstitutionSwitches): void {
  if (!seesInstitution(p, institution)) throw notFound('Institution');
  const admin = administersInstitution(p, institution);
  if (!admin && !p.memberships.has(institution.id)) throw forbidden('You are not a member of this institution');
  if (!admin && institution.disableAssistantsForUser) throw forbidden('Assistants are disabled for users in this institution');
}

/** Using an assistant in a Q&A request asked in `institution` (null: the personal space). */
export function assertUseAssistant(p: Principal, a: AssistantAccess | undefined, institution: InstitutionSwitches | null): asserts a is AssistantAccess {
  assertSeeAssistant(p, a);
  if (a.institutionId !== null && a.institutionId !== institution?.id) throw forbidden('This assistant belongs to another institution than the one asked in');
  if (institution) {
    const admin = administersInstitution(p, institution);
    if (institution.assistantsDisabled.includes(a.id)) throw forbidden('This assistant is disabled in this institution');
    if (institution.disableAssistantsForUser && !admin) throw forbidden('Assistants are disabled for users in this institution');
  }
}

/**
 * SQL: the assistant (alias `a`) is visible to the caller (the same rule as canSeeAssistant).
 * Admin power: superadmin everywhere; account admin over its account's institutions; institution
 * admins over theirs.
 */
export function assistantVisibleSql(p: AuthContext): SQL {
  const adminInstitutions = [...p.memberships.entries()].filter(([, m]) => m.role === 'admin').map(([id]) => id);
  const memberInstitutions = [...p.memberships.keys()];
  const superadmin = p.role === 'superadmin';
  const accountAdmin = p.role === 'accountadmin' && canInAccount(p, 'institutions.edit', p.accountId);
  return sql`(
    a.owner_user_id = ${p.userId}
    or (a.institution_id is not null and (
         ${superadmin ? sql`true` : sql`false`}
         or ${accountAdmin ? sql`a.account_id = ${p.accountId}` : sql`false`}
         or ${inList(sql.raw('a.institution_id'), adminInstitutions)}
         or (${inList(sql.raw('a.institution_id'), memberInstitutions)} and not a.admin_only and (a.institution_shared or a.owner_user_id is null))
    ))
  )`;
}

/**
 * Rows the admin feedbacks listing may return (admin.feedbacks.read), or 403. What superadmins own (their
 * Q&A records with a thumb or feedback: questions, answers, notes) is listed to superadmins only.
 */
export function feedbackListingScope(p: Principal): AdminListingScope {
  return adminListingScope(p, 'admin.feedbacks.read');
}

/**
 * Rows the admin assistants listing may return (admin.assistants.read), or 403. A superadmin's personal
 * assistants (no institution) are listed to superadmins only; those it made in an institution are that
 * institution's.
 */
export function assistantListingScope(p: Principal): AdminListingScope {
  return adminListingScope(p, 'admin.assistants.read');
}

/** A history record is its asker's: anyone else gets 404. */
export function assertOwnHistory(p: Principal, record: { userId: string } | undefined): asserts record is { userId: string } {
  if (!record || record.userId !== p.userId) throw notFound('History record');
}

/**
 * Asking in an institution requires enrolment there (superadmins too: answers are paid from and
 * recorded in the institution). 403 otherwise.
 */
export function assertAskIn(p: Principal, institutionId: string): void {
  if (!p.memberships.has(institutionId)) throw forbidden('You are not enrolled in this institution');
}

/**
 * The caller as it acts inside the institution a Q&A request is asked in (null: the personal space):
 * what retrieval and the tools see. Asking in an institution requires enrolment there (assertAskIn),
 * and only the working institution changes: the global role and the memberships stay the caller's own,
 * so the caller's role in that institution is the one of its membership there (never the current
 * institution's), and nothing is widened: the search scope (search.policy) is the asked institution's
 * instance files, the account-scope files of its account and the caller's personal files, always
 * within the vault's visibility.
 * Without an institution the caller has none either: the personal space searches personal files and
 * the account-scope files of the caller's own account.
 */
export function actingIn<P extends AuthContext>(p: P, institutionId: string | null): P {
  if (institutionId === null) return p.institutionId === null ? p : { ...p, institutionId: null };
  assertAskIn(p, institutionId);
  return p.institutionId === institutionId ? p : { ...p, institutionId };
}
