import { and, asc, eq, isNotNull, or, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { containsInsensitive } from '../../db/search.js';
import { withNfc } from '../../db/values.js';
import { accounts, institutionLtiContexts, institutions, memberships, users } from '../../db/schema.js';
import { payCreditAward } from './credits.repository.js';
import { newId } from '../../shared/ids.js';

export type AccountRow = typeof accounts.$inferSelect;
export type InstitutionRow = typeof institutions.$inferSelect;
export type MembershipRow = typeof memberships.$inferSelect;

/** The columns the admin listings search, stored in NFC (values.ts nfc). */
const ACCOUNT_TEXT = ['name', 'managerEmail'] as const;
const INSTITUTION_TEXT = ['name', 'ainame', 'contactEmail'] as const;
const USER_TEXT = ['email', 'fname', 'lname'] as const;

export async function insertAccount(db: DbOrTx, row: typeof accounts.$inferInsert): Promise<AccountRow> {
  const [created] = await db.insert(accounts).values(withNfc(row, ACCOUNT_TEXT)).returning();
  return created!;
}

export async function findAccount(db: DbOrTx, id: string): Promise<AccountRow | undefined> {
  const [row] = await db.select().from(accounts).where(eq(accounts.id, id)).limit(1);
  return row;
}

/**
 * Inserts an institution; its LTI context ids are claimed in institution_lti_contexts in the same
 * transaction (a context id another institution holds fails with a unique violation, 23505).
 */
export async function insertInstitution(db: DbOrTx, row: typeof institutions.$inferInsert): Promise<InstitutionRow> {
  return db.transaction(async (tx) => {
    const ltiContextIds = row.ltiContextIds ? [...new Set(row.ltiContextIds)] : undefined;
    const [created] = await tx.insert(institutions).values(withNfc({ ...row, ...(ltiContextIds ? { ltiContextIds } : {}) }, INSTITUTION_TEXT)).returning();
    if (ltiContextIds?.length) await claimLtiContexts(tx, created!.id, ltiContextIds);
    return created!;
  });
}

async function claimLtiContexts(db: DbOrTx, institutionId: string, contextIds: readonly string[]): Promise<void> {
  await db.delete(institutionLtiContexts).where(eq(institutionLtiContexts.institutionId, institutionId));
  if (contextIds.length > 0) await db.insert(institutionLtiContexts).values(contextIds.map((contextId) => ({ contextId, institutionId })));
}

/** The institution that holds an LTI context id, if any. */
export async function institutionOfLtiContext(db: DbOrTx, contextId: string): Promise<string | undefined> {
  const [row] = await db.select({ id: institutionLtiContexts.institutionId }).from(institutionLtiContexts).where(eq(institutionLtiContexts.contextId, contextId)).limit(1);
  return row?.id;
}

export async function findInstitution(db: DbOrTx, id: string): Promise<InstitutionRow | undefined> {
  const [row] = await db.select().from(institutions).where(eq(institutions.id, id)).limit(1);
  return row;
}

export async function insertUser(db: DbOrTx, row: typeof users.$inferInsert) {
  const [created] = await db.insert(users).values(withNfc(row, USER_TEXT)).returning();
  return created!;
}

export async function countUsers(db: DbOrTx): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(users);
  return Number(row?.n ?? 0);
}

/**
 * Enrols a user; a new member of an institution whose credits are not pooled receives the
 * institution's creditAward from the institution's balance, once per (user, institution) ever
 * (payCreditAward).
 */
export async function upsertMembership(db: DbOrTx, userId: string, institutionId: string, role: string): Promise<{ created: boolean }> {
  const inserted = await db
    .insert(memberships)
    .values({ userId, institutionId, role })
    .onConflictDoNothing()
    .returning({ userId: memberships.userId });
  if (inserted.length === 0) {
    await db.update(memberships).set({ role }).where(and(eq(memberships.userId, userId), eq(memberships.institutionId, institutionId)));
    return { created: false };
  }
  await payCreditAward(db, userId, institutionId);
  return { created: true };
}

export async function deleteMembership(db: DbOrTx, userId: string, institutionId: string): Promise<boolean> {
  const rows = await db
    .delete(memberships)
    .where(and(eq(memberships.userId, userId), eq(memberships.institutionId, institutionId)))
    .returning({ userId: memberships.userId });
  return rows.length > 0;
}

export async function listMemberships(db: DbOrTx, userId: string): Promise<MembershipRow[]> {
  return db.select().from(memberships).where(eq(memberships.userId, userId));
}

// ───────────── admin management (accounts, institutions, users, credits) ─────────────

export type UserRow = typeof users.$inferSelect;


const inList = (column: SQL | AnyColumn, values: readonly string[]): SQL =>
  values.length === 0 ? sql`false` : sql`${column} in (${sql.join(values.map((v) => sql`${v}`), sql`, `)})`;

export interface Paging {
  limit: number;
  offset: number;
}

/**
 * Which rows of a tenant-scoped table a listing may return: everything, or rows of the given
 * accounts and/or institutions (the union of both).
 */
export type RowScope = { all: true } | { all: false; accountIds: readonly string[]; institutionIds: readonly string[] };

/** Stamps the account's last activity; monotonic, one atomic statement (called when a session starts). */
export async function touchAccountActivity(db: DbOrTx, accountId: string, now: Date): Promise<void> {
  await db
    .update(accounts)
    .set({ lastActivityAt: sql`greatest(coalesce(${accounts.lastActivityAt}, ${now.toISOString()}::timestamptz), ${now.toISOString()}::timestamptz)` })
    .where(eq(accounts.id, accountId));
}

export async function updateAccount(db: DbOrTx, id: string, patch: Partial<typeof accounts.$inferInsert>, now: Date): Promise<AccountRow | undefined> {
  const [row] = await db
    .update(accounts)
    .set({ ...withNfc(patch, ACCOUNT_TEXT), updatedAt: now })
    .where(eq(accounts.id, id))
    .returning();
  return row;
}

/**
 * What a deletion did: whether the record existed, and the storage keys of the uploads that went with it
 * (ON DELETE CASCADE removes their rows, not their bytes: the caller deletes those from the blob storage
 * once the transaction has committed).
 */
export interface Deletion {
  deleted: boolean;
  storageKeys: string[];
}

/** Storage keys of the uploads matching `where` (a condition on the uploads table). */
async function uploadStorageKeys(db: DbOrTx, where: SQL): Promise<string[]> {
  const rows = await rowsOf<{ storage_key: string }>(db, sql`select storage_key from uploads where ${where}`);
  return rows.map((r) => r.storage_key);
}

/**
 * Deletes an account with everything in it (institutions, users, their uploads... by cascade). The account
 * and its users are locked first: inserting an upload takes a key-share lock on its account and owner rows
 * (foreign keys), so once they are locked no upload can be added, and the keys read next are all of those
 * the cascade removes (the account's uploads, and those its users own in other accounts).
 */
export async function deleteAccount(db: DbOrTx, id: string): Promise<Deletion> {
  return db.transaction(async (tx) => {
    const [locked] = await rowsOf<{ id: string }>(tx, sql`select id from accounts where id = ${id} for update`);
    if (!locked) return { deleted: false, storageKeys: [] };
    await rowsOf(tx, sql`select id from users where account_id = ${id} order by id for update`);
    const storageKeys = await uploadStorageKeys(
      tx,
      sql`account_id = ${id}
          or owner_user_id in (select id from users where account_id = ${id})
          or institution_id in (select id from institutions where account_id = ${id})`,
    );
    const rows = await tx.delete(accounts).where(eq(accounts.id, id)).returning({ id: accounts.id });
    return { deleted: rows.length > 0, storageKeys };
  });
}

export interface AccountListFilter {
  /** null: every account. */
  accountIds: readonly string[] | null;
  search?: string;
  activeOnly: boolean;
}

export async function listAccounts(db: DbOrTx, filter: AccountListFilter, paging: Paging | null): Promise<{ rows: AccountRow[]; total: number }> {
  const conditions: SQL[] = [];
  if (filter.accountIds) conditions.push(inList(accounts.id, filter.accountIds));
  if (filter.activeOnly) conditions.push(isNotNull(accounts.lastActivityAt));
  if (filter.search) {
    conditions.push(or(containsInsensitive(accounts.name, filter.search), containsInsensitive(sql`coalesce(${accounts.managerEmail}, '')`, filter.search))!);
  }
  const where = conditions.length > 0 ? and(...conditions) : undefined;
  const [counted] = await db.select({ n: sql<number>`count(*)::int` }).from(accounts).where(where);
  const query = db.select().from(accounts).where(where).orderBy(asc(sql`lower(${accounts.name})`), asc(accounts.id));
  const rows = paging ? await query.limit(paging.limit).offset(paging.offset) : await query;
  return { rows, total: Number(counted?.n ?? 0) };
}

export interface InstitutionsUsageRow {
  accountId: string;
  count: number;
  credits: number;
  creditsUsed: number;
}

/** Per account: how many institutions it has and the sums of their balances and consumption. */
export async function institutionsUsage(db: DbOrTx, accountIds: readonly string[]): Promise<Map<string, InstitutionsUsageRow>> {
  const out = new Map<string, InstitutionsUsageRow>();
  if (accountIds.length === 0) return out;
  const rows = await db
    .select({
      accountId: institutions.accountId,
      count: sql<number>`count(*)::int`,
      credits: sql<string>`coalesce(sum(${institutions.credits}), 0)`,
      creditsUsed: sql<string>`coalesce(sum(${institutions.creditsUsed}), 0)`,
    })
    .from(institutions)
    .where(inList(institutions.accountId, accountIds))
    .groupBy(institutions.accountId);
  for (const r of rows) out.set(r.accountId, { accountId: r.accountId, count: Number(r.count), credits: Number(r.credits), creditsUsed: Number(r.creditsUsed) });
  return out;
}

/** Updates an institution; a new list of LTI context ids is claimed in the same transaction (see insertInstitution). */
export async function updateInstitution(db: DbOrTx, id: string, patch: Partial<typeof institutions.$inferInsert>, now: Date): Promise<InstitutionRow | undefined> {
  return db.transaction(async (tx) => {
    const ltiContextIds = patch.ltiContextIds ? [...new Set(patch.ltiContextIds)] : undefined;
    const [row] = await tx
      .update(institutions)
      .set({ ...withNfc(patch, INSTITUTION_TEXT), ...(ltiContextIds ? { ltiContextIds } : {}), updatedAt: now })
      .where(eq(institutions.id, id))
      .returning();
    if (row && ltiContextIds) await claimLtiContexts(tx, id, ltiContextIds);
    return row;
  });
}

/**
 * Deletes a holder of credits in one statement, with a `closed` ledger row taking its remaining balance off
 * the account's books: its earlier ledger rows stay (their holder set to null), so the account's ledger
 * still adds up to the balances it holds. The closing row names the deleted holder in ref_id.
 * The holder is locked first and the storage keys of its uploads read before the delete, in the same
 * transaction: inserting an upload takes a key-share lock on its owner and institution rows (foreign keys),
 * so no upload can be added in between, and the keys are exactly those of the upload rows the cascade removes.
 */
async function deleteHolder(db: DbOrTx, table: 'institutions' | 'users', id: string, actorUserId: string | null): Promise<Deletion> {
  return db.transaction(async (tx) => {
    const [locked] = await rowsOf<{ id: string }>(tx, sql`select id from ${sql.raw(table)} where id = ${id} for update`);
    if (!locked) return { deleted: false, storageKeys: [] };
    const storageKeys = await uploadStorageKeys(tx, table === 'users' ? sql`owner_user_id = ${id}` : sql`institution_id = ${id}`);
    const rows = await rowsOf<{ id: string }>(
      tx,
      sql`with gone as (delete from ${sql.raw(table)} where id = ${id} returning id, account_id, credits),
          closed as (
            insert into credit_ledger (id, account_id, delta, kind, actor_user_id, ref_id, note)
            select ${newId()}, g.account_id, -g.credits, 'closed', ${actorUserId}, g.id, ${`balance of a deleted ${table === 'users' ? 'user' : 'institution'}`}
              from gone g where g.credits <> 0)
          select id from gone`,
    );
    return { deleted: rows.length > 0, storageKeys };
  });
}

/** Deletes an institution; its uploads go by cascade (their storage keys are returned: see Deletion). */
export async function deleteInstitution(db: DbOrTx, id: string, actorUserId: string | null = null): Promise<Deletion> {
  return deleteHolder(db, 'institutions', id, actorUserId);
}

export interface InstitutionListFilter {
  scope: RowScope;
  accountIds?: readonly string[];
  search?: string;
}

export async function listInstitutions(db: DbOrTx, filter: InstitutionListFilter, paging: Paging): Promise<{ rows: InstitutionRow[]; total: number }> {
  const conditions: SQL[] = [];
  if (!filter.scope.all) {
    conditions.push(or(inList(institutions.accountId, filter.scope.accountIds), inList(institutions.id, filter.scope.institutionIds))!);
  }
  if (filter.accountIds) conditions.push(inList(institutions.accountId, filter.accountIds));
  if (filter.search) {
    conditions.push(or(containsInsensitive(institutions.name, filter.search), containsInsensitive(institutions.ainame, filter.search))!);
  }
  const where = conditions.length > 0 ? and(...conditions) : undefined;
  const [counted] = await db.select({ n: sql<number>`count(*)::int` }).from(institutions).where(where);
  const rows = await db
    .select()
    .from(institutions)
    .where(where)
    .orderBy(asc(sql`lower(${institutions.name})`), asc(institutions.id))
    .limit(paging.limit)
    .offset(paging.offset);
  return { rows, total: Number(counted?.n ?? 0) };
}

/**
 * The user's personal rows (sessions, memberships, memory, uploads, collections, histories, the assistants
 * they own, ...) go in the same statement by ON DELETE CASCADE: assistants must, since a null owner marks a
 * system assistant (migration 0016). Every upload they own goes, whatever its scope (personal, instance or
 * account): their storage keys are returned (see Deletion).
 */
export async function deleteUser(db: DbOrTx, id: string, actorUserId: string | null = null): Promise<Deletion> {
  return deleteHolder(db, 'users', id, actorUserId);
}

/**
 * The active superadmins, locked (for update) until the end of the transaction: a change that could take
 * the last one away reads them here, so a concurrent change of another superadmin waits and then reads
 * the outcome (tenancy.policy assertSuperadminRemains).
 */
export async function lockActiveSuperadmins(db: DbOrTx): Promise<Array<{ id: string; accountId: string }>> {
  const rows = await rowsOf<{ id: string; account_id: string }>(db, sql`select id, account_id from users where role = 'superadmin' and status = 'active' order by id for update`);
  return rows.map((r) => ({ id: r.id, accountId: r.account_id }));
}

export interface UserListFilter {
  scope: RowScope;
  accountIds?: readonly string[];
  /** Members of one of these institutions; an empty list matches nothing (the filter named an institution the caller may not see). */
  institutionIds?: readonly string[];
  search?: string;
}

const memberOf = (institutionIds: readonly string[]): SQL =>
  institutionIds.length === 0
    ? sql`false`
    : sql`exists (select 1 from ${memberships} m where m.user_id = ${users.id} and ${inList(sql.raw('m.institution_id'), institutionIds)})`;

export async function listUsers(db: DbOrTx, filter: UserListFilter, paging: Paging): Promise<{ rows: UserRow[]; total: number }> {
  const conditions: SQL[] = [];
  if (!filter.scope.all) conditions.push(or(inList(users.accountId, filter.scope.accountIds), memberOf(filter.scope.institutionIds))!);
  if (filter.accountIds) conditions.push(inList(users.accountId, filter.accountIds));
  if (filter.institutionIds) conditions.push(memberOf(filter.institutionIds));
  if (filter.search) {
    conditions.push(or(containsInsensitive(users.email, filter.search), containsInsensitive(users.fname, filter.search), containsInsensitive(users.lname, filter.search))!);
  }
  const where = conditions.length > 0 ? and(...conditions) : undefined;
  const [counted] = await db.select({ n: sql<number>`count(*)::int` }).from(users).where(where);
  const rows = await db.select().from(users).where(where).orderBy(asc(sql`lower(${users.email})`), asc(users.id)).limit(paging.limit).offset(paging.offset);
  return { rows, total: Number(counted?.n ?? 0) };
}

export interface UserMembershipRow {
  userId: string;
  institutionId: string;
  role: string;
  accountId: string;
}

/**
 * Memberships of several users, with the account of each institution. `lock`: the membership rows are
 * locked (for update) until the end of the transaction, so a decision taken on them holds for its change.
 */
export async function membershipsOfUsers(db: DbOrTx, userIds: readonly string[], options: { lock?: boolean } = {}): Promise<UserMembershipRow[]> {
  if (userIds.length === 0) return [];
  const query = db
    .select({ userId: memberships.userId, institutionId: memberships.institutionId, role: memberships.role, accountId: institutions.accountId })
    .from(memberships)
    .innerJoin(institutions, eq(institutions.id, memberships.institutionId))
    .where(inList(memberships.userId, userIds))
    .orderBy(asc(memberships.createdAt), asc(memberships.institutionId));
  return options.lock ? query.for('update', { of: memberships }) : query;
}

/** Institutions by id (to check a list given in a request). */
export async function findInstitutions(db: DbOrTx, ids: readonly string[]): Promise<InstitutionRow[]> {
  if (ids.length === 0) return [];
  return db.select().from(institutions).where(inList(institutions.id, ids));
}

/** Drops the user's current institution when it is the one they just left. */
export async function clearCurrentInstitution(db: DbOrTx, userId: string, institutionId: string): Promise<void> {
  await db.update(users).set({ currentInstitutionId: null }).where(and(eq(users.id, userId), eq(users.currentInstitutionId, institutionId)));
}
