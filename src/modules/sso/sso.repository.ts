import { and, asc, eq, sql } from 'drizzle-orm';
import type { DbOrTx } from '../../db/client.js';
import { inList } from '../../db/search.js';
import { ssoProviders } from '../../db/schema.js';

export type SsoProviderRow = typeof ssoProviders.$inferSelect;

export async function insertProvider(db: DbOrTx, row: typeof ssoProviders.$inferInsert): Promise<SsoProviderRow> {
  const [created] = await db.insert(ssoProviders).values(row).returning();
  return created!;
}

export async function findProvider(db: DbOrTx, id: string): Promise<SsoProviderRow | undefined> {
  const [row] = await db.select().from(ssoProviders).where(eq(ssoProviders.id, id)).limit(1);
  return row;
}

export async function updateProvider(db: DbOrTx, id: string, patch: Partial<typeof ssoProviders.$inferInsert>, now: Date): Promise<SsoProviderRow | undefined> {
  const [row] = await db.update(ssoProviders).set({ ...patch, updatedAt: now }).where(eq(ssoProviders.id, id)).returning();
  return row;
}

export async function deleteProvider(db: DbOrTx, id: string): Promise<boolean> {
  const rows = await db.delete(ssoProviders).where(eq(ssoProviders.id, id)).returning({ id: ssoProviders.id });
  return rows.length > 0;
}

export async function listProviders(db: DbOrTx, accountIds: readonly string[] | null, filterAccountIds: readonly string[] | undefined, paging: { limit: number; offset: number }) {
  const conditions = [];
  if (accountIds) conditions.push(inList(ssoProviders.accountId, accountIds));
  if (filterAccountIds) conditions.push(inList(ssoProviders.accountId, filterAccountIds));
  const where = conditions.length > 0 ? and(...conditions) : undefined;
  const [counted] = await db.select({ n: sql<number>`count(*)::int` }).from(ssoProviders).where(where);
  const rows = await db
    .select()
    .from(ssoProviders)
    .where(where)
    .orderBy(asc(sql`lower(${ssoProviders.name})`), asc(ssoProviders.id))
    .limit(paging.limit)
    .offset(paging.offset);
  return { rows, total: Number(counted?.n ?? 0) };
}
