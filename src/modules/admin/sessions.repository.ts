import { and, desc, eq, gte, lte, ne, or, sql, type SQL } from 'drizzle-orm';
import type { DbOrTx } from '../../db/client.js';
import { containsInsensitive, inList } from '../../db/search.js';
import { institutions, sessions, users } from '../../db/schema.js';
import type { AdminListingScope } from '../tenancy/tenancy.policy.js';

export interface SessionListFilter {
  scope: AdminListingScope;
  accountIds?: readonly string[];
  /** Sessions opened in (switched to) one of these institutions; an empty list matches nothing (the filter named an institution the caller may not see). */
  institutionIds?: readonly string[];
  usersearch?: string;
  from: Date;
  to: Date;
}

/**
 * Sessions of these accounts: of their users (the user's home account), or opened in (switched to) one of
 * their institutions, whoever the user: an account's admin administers both (contract §2).
 */
const ofAccounts = (accountIds: readonly string[]): SQL =>
  accountIds.length === 0
    ? sql`false`
    : or(inList(sessions.accountId, accountIds), sql`${sessions.institutionId} in (select i.id from ${institutions} i where ${inList(sql.raw('i.account_id'), accountIds)})`)!;

export async function listSessions(db: DbOrTx, f: SessionListFilter, paging: { limit: number; offset: number }) {
  const conditions: SQL[] = [lte(sessions.createdAt, f.to), gte(sessions.lastActivityAt, f.from)];
  const { rows: scope, superadmins } = f.scope;
  if (!scope.all) conditions.push(or(ofAccounts(scope.accountIds), inList(sessions.institutionId, scope.institutionIds))!);
  if (!superadmins) conditions.push(ne(users.role, 'superadmin'));
  if (f.accountIds) conditions.push(ofAccounts(f.accountIds));
  if (f.institutionIds) conditions.push(inList(sessions.institutionId, f.institutionIds));
  if (f.usersearch) conditions.push(or(containsInsensitive(users.email, f.usersearch), containsInsensitive(users.fname, f.usersearch), containsInsensitive(users.lname, f.usersearch))!);
  const where = and(...conditions);
  const [counted] = await db.select({ n: sql<number>`count(*)::int` }).from(sessions).innerJoin(users, eq(users.id, sessions.userId)).where(where);
  const rows = await db
    .select({
      id: sessions.id,
      userId: users.id,
      email: users.email,
      fname: users.fname,
      lname: users.lname,
      accountId: sessions.accountId,
      institutionId: sessions.institutionId,
      /** The account of the session's institution (null without one, or once it is deleted): whether the caller may see it. */
      institutionAccountId: institutions.accountId,
      ip: sessions.ip,
      ua: sessions.ua,
      createdAt: sessions.createdAt,
      lastActivityAt: sessions.lastActivityAt,
      expiresAt: sessions.expiresAt,
      revokedAt: sessions.revokedAt,
    })
    .from(sessions)
    .innerJoin(users, eq(users.id, sessions.userId))
    .leftJoin(institutions, eq(institutions.id, sessions.institutionId))
    .where(where)
    .orderBy(desc(sessions.createdAt), desc(sessions.id))
    .limit(paging.limit)
    .offset(paging.offset);
  return { rows, total: Number(counted?.n ?? 0) };
}
export type SessionListRow = Awaited<ReturnType<typeof listSessions>>['rows'][number];
