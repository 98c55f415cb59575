import { and, eq, sql } from 'drizzle-orm';
import type { DbOrTx } from '../../db/client.js';
import { accounts, institutions, memberships, users } from '../../db/schema.js';

export type AccountRow = typeof accounts.$inferSelect;
export type InstitutionRow = typeof institutions.$inferSelect;
export type MembershipRow = typeof memberships.$inferSelect;

export async function insertAccount(db: DbOrTx, row: typeof accounts.$inferInsert): Promise<AccountRow> {
  const [created] = await db.insert(accounts).values(row).returning();
  return created!;
}

export async function findAccount(db: DbOrTx, id: string): Promise<AccountRow | undefined> {
  const [row] = await db.select().from(accounts).where(eq(accounts.id, id)).limit(1);
  return row;
}

export async function insertInstitution(db: DbOrTx, row: typeof institutions.$inferInsert): Promise<InstitutionRow> {
  const [created] = await db.insert(institutions).values(row).returning();
  return created!;
}

export async function findInstitution(db: DbOrTx, id: string): Promise<InstitutionRow | undefined> {
  const [row] = await db.select().from(institutions).where(eq(institutions.id, id)).limit(1);
  return row;
}

export async function insertUser(db: DbOrTx, row: typeof users.$inferInsert) {
  const [created] = await db.insert(users).values(row).returning();
  return created!;
}

export async function countUsers(db: DbOrTx): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(users);
  return Number(row?.n ?? 0);
}

/**
 * Enrols a user; a new member of an institution whose credits are not pooled receives the
 * institution's creditAward on their own balance (atomic increment, only when the membership is new).
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
  await db.execute(sql`
    update users u set credits = u.credits + i.credit_award
      from institutions i
     where u.id = ${userId} and i.id = ${institutionId} and i.pool_credits = false and i.credit_award > 0`);
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
