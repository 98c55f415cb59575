import { and, asc, desc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { Db, DbOrTx } from '../../db/client.js';
import { institutions, memberships, memoryParams, users } from '../../db/schema.js';

export type MemoryRow = typeof memoryParams.$inferSelect;

/** A memory row with what presenting and authorizing it needs from its institution. */
export interface MemoryWithInstitution extends MemoryRow {
  institutionName: string | null;
  institutionAiname: string | null;
  institutionPicture: string | null;
  institutionAccountId: string | null;
}

const columns = {
  id: memoryParams.id,
  authorUserId: memoryParams.authorUserId,
  institutionId: memoryParams.institutionId,
  keyName: memoryParams.keyName,
  keyValue: memoryParams.keyValue,
  keyDescription: memoryParams.keyDescription,
  keyNamespace: memoryParams.keyNamespace,
  shared: memoryParams.shared,
  createdAt: memoryParams.createdAt,
  updatedAt: memoryParams.updatedAt,
  institutionName: institutions.name,
  institutionAiname: institutions.ainame,
  institutionPicture: institutions.picture,
  institutionAccountId: institutions.accountId,
};

/** Safety bound of GET /api/user/memory (documented on the route). */
export const USER_MEMORY_LIMIT = 5000;

/**
 * GET /api/user/memory reads two kinds of rows, each with one prepared statement (built once per
 * database handle: building the SQL costs more than running it on the embedded database), and the
 * memory cache keeps the results: the personal rows of an author, the shared rows of an institution.
 */
const preparedPersonal = new WeakMap<Db, ReturnType<typeof buildPersonalQuery>>();
const preparedShared = new WeakMap<Db, ReturnType<typeof buildSharedQuery>>();

function buildPersonalQuery(db: Db) {
  return db
    .select(columns)
    .from(memoryParams)
    .leftJoin(institutions, eq(institutions.id, memoryParams.institutionId))
    .where(and(eq(memoryParams.authorUserId, sql.placeholder('userId')), eq(memoryParams.shared, false)))
    .orderBy(desc(memoryParams.createdAt), desc(memoryParams.id))
    .limit(USER_MEMORY_LIMIT)
    .prepare('memory_personal_of_user');
}

function buildSharedQuery(db: Db) {
  return db
    .select(columns)
    .from(memoryParams)
    .leftJoin(institutions, eq(institutions.id, memoryParams.institutionId))
    .where(and(eq(memoryParams.institutionId, sql.placeholder('institutionId')), eq(memoryParams.shared, true)))
    .orderBy(desc(memoryParams.createdAt), desc(memoryParams.id))
    .limit(USER_MEMORY_LIMIT)
    .prepare('memory_shared_of_institution');
}

export async function listPersonalOf(db: Db, userId: string): Promise<MemoryWithInstitution[]> {
  let q = preparedPersonal.get(db);
  if (!q) preparedPersonal.set(db, (q = buildPersonalQuery(db)));
  return q.execute({ userId });
}

export async function listSharedOf(db: Db, institutionId: string): Promise<MemoryWithInstitution[]> {
  let q = preparedShared.get(db);
  if (!q) preparedShared.set(db, (q = buildSharedQuery(db)));
  return q.execute({ institutionId });
}

export async function findWithInstitution(db: DbOrTx, id: string): Promise<MemoryWithInstitution | undefined> {
  const [row] = await db.select(columns).from(memoryParams).leftJoin(institutions, eq(institutions.id, memoryParams.institutionId)).where(eq(memoryParams.id, id)).limit(1);
  return row;
}

export async function insertMemory(db: DbOrTx, row: typeof memoryParams.$inferInsert): Promise<MemoryRow> {
  const [created] = await db.insert(memoryParams).values(row).returning();
  return created!;
}

export async function updateMemory(db: DbOrTx, id: string, patch: Partial<typeof memoryParams.$inferInsert>, now: Date): Promise<MemoryRow | undefined> {
  const [row] = await db.update(memoryParams).set({ ...patch, updatedAt: now }).where(eq(memoryParams.id, id)).returning();
  return row;
}

export async function deleteMemory(db: DbOrTx, id: string): Promise<boolean> {
  const rows = await db.delete(memoryParams).where(eq(memoryParams.id, id)).returning({ id: memoryParams.id });
  return rows.length > 0;
}

/** The rows authored by a user (admin listing; grouping is the service's job), personal first, at most USER_MEMORY_LIMIT (a safety bound, documented on the route). */
export async function listAuthoredBy(db: DbOrTx, userId: string): Promise<MemoryWithInstitution[]> {
  return db
    .select(columns)
    .from(memoryParams)
    .leftJoin(institutions, eq(institutions.id, memoryParams.institutionId))
    .where(eq(memoryParams.authorUserId, userId))
    .orderBy(asc(memoryParams.shared), asc(institutions.name), asc(memoryParams.institutionId), desc(memoryParams.createdAt), desc(memoryParams.id))
    .limit(USER_MEMORY_LIMIT);
}

export async function listSharedOfInstitution(db: DbOrTx, institutionId: string, paging: { limit: number; offset: number }): Promise<{ rows: MemoryWithInstitution[]; total: number }> {
  const where = and(eq(memoryParams.institutionId, institutionId), eq(memoryParams.shared, true));
  const [counted] = await db.select({ n: sql<number>`count(*)::int` }).from(memoryParams).where(where);
  const rows = await db
    .select(columns)
    .from(memoryParams)
    .leftJoin(institutions, eq(institutions.id, memoryParams.institutionId))
    .where(where)
    .orderBy(desc(memoryParams.createdAt), desc(memoryParams.id))
    .limit(paging.limit)
    .offset(paging.offset);
  return { rows, total: Number(counted?.n ?? 0) };
}

export interface BulkSelection {
  /** Rows of this author, or shared rows of this institution. */
  authorUserId?: string;
  institutionId?: string;
  ids?: readonly string[];
  namespace?: string;
  shared?: boolean;
}

/** A candidate of a bulk delete, locked until the transaction ends, with the author's home account. */
export interface BulkCandidate extends MemoryWithInstitution {
  authorAccountId: string;
}

/** Candidates of a bulk delete, locked FOR UPDATE in the caller's transaction. */
export async function lockCandidates(tx: DbOrTx, s: BulkSelection): Promise<BulkCandidate[]> {
  const conditions: SQL[] = [];
  if (s.authorUserId) conditions.push(eq(memoryParams.authorUserId, s.authorUserId));
  if (s.institutionId) conditions.push(eq(memoryParams.institutionId, s.institutionId), eq(memoryParams.shared, true));
  if (s.ids) conditions.push(s.ids.length > 0 ? inArray(memoryParams.id, [...s.ids]) : sql`false`);
  if (s.namespace !== undefined) conditions.push(eq(memoryParams.keyNamespace, s.namespace));
  if (s.shared !== undefined) conditions.push(eq(memoryParams.shared, s.shared));
  return tx
    .select({ ...columns, authorAccountId: users.accountId })
    .from(memoryParams)
    .innerJoin(users, eq(users.id, memoryParams.authorUserId))
    .leftJoin(institutions, eq(institutions.id, memoryParams.institutionId))
    .where(and(...conditions))
    .for('update', { of: memoryParams });
}

export async function deleteMany(tx: DbOrTx, ids: readonly string[]): Promise<number> {
  if (ids.length === 0) return 0;
  const rows = await tx.delete(memoryParams).where(inArray(memoryParams.id, [...ids])).returning({ id: memoryParams.id });
  return rows.length;
}

/** The institutions a user is enrolled in, with their accounts (to decide who administers them). */
export async function institutionsOfUser(db: DbOrTx, userId: string): Promise<Array<{ id: string; accountId: string }>> {
  return db
    .select({ id: memberships.institutionId, accountId: institutions.accountId })
    .from(memberships)
    .innerJoin(institutions, eq(institutions.id, memberships.institutionId))
    .where(eq(memberships.userId, userId));
}
