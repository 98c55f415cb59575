import { sql, type SQL } from 'drizzle-orm';
import type { AuthContext } from '../identity/auth-context.js';
import { visibleCondition } from '../vault/vault.policy.js';

/**
 * Who may search what (spec: "the caller's eligible vault: personal, current institution, account-shared
 * siblings"), decided here and nowhere else, on top of the vault's one visibility predicate:
 *
 * - the caller's personal files;
 * - instance files of the caller's CURRENT institution (not of its other institutions: a search answers
 *   in the context of the institution the caller is working in);
 * - account-scope files of the current institution's account (without a current institution: of the
 *   caller's own account);
 * and, always, the vault's visibleCondition (membership, is_private: others' private files never).
 * Only ingested files in use are searched (searchableStatus).
 */
export function searchScopeCondition(auth: AuthContext, alias = 'u'): SQL {
  const col = (name: string) => sql.raw(`${alias}.${name}`);
  const current = auth.institutionId ? auth.memberships.get(auth.institutionId) : undefined;
  const accountId = current?.accountId ?? auth.accountId;
  const eligible = current
    ? sql`(${col('scope')} = 'personal' or (${col('scope')} = 'instance' and ${col('institution_id')} = ${auth.institutionId}) or (${col('scope')} = 'account' and ${col('account_id')} = ${accountId}))`
    : sql`(${col('scope')} = 'personal' or (${col('scope')} = 'account' and ${col('account_id')} = ${accountId}))`;
  return sql`(${searchableStatus(alias)} and ${eligible} and ${visibleCondition(auth, alias, { hasPrivateFlag: true })})`;
}

/**
 * The statuses searched: `active` and `selected` (the spec's `excluded` filter is "status in none of selected, deleted":
 * a selected file is one in use, not one set aside); not `inactive` (set aside by its owner), nor files still
 * processing, in error or deleted.
 */
export function searchableStatus(alias = 'u'): SQL {
  return sql`${sql.raw(`${alias}.status`)} in ('active', 'selected')`;
}

/** Choosing a single retrieval method (evaluation switch) is for superadmins only. */
export function canChooseSearchMethod(auth: AuthContext): boolean {
  return auth.role === 'superadmin';
}

/**
 * Confidential institution files (scope `instance` or `account`: files other people see) never show their
 * text in a search result: the snippet is the placeholder (spec rule 3, contract §5). A personal file is in
 * no one else's scope, so its owner sees its snippet like any other (contract §5: "other snippets aim at
 * about 200 characters"). The chunk text still reaches the server-side answer pipeline.
 */
export function snippetIsHidden(upload: { confidential: boolean; scope: string }): boolean {
  return upload.confidential && upload.scope !== 'personal';
}
