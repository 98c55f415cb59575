import { and, asc, eq, sql, type SQL } from 'drizzle-orm';
import type { DbOrTx } from '../../db/client.js';
import { institutions, settings } from '../../db/schema.js';

export type SettingRow = typeof settings.$inferSelect;
export interface SettingWithAccount extends SettingRow {
  institutionAccountId: string;
}

const withAccount = { ...getColumns(), institutionAccountId: institutions.accountId };
function getColumns() {
  return {
    id: settings.id,
    institutionId: settings.institutionId,
    userId: settings.userId,
    key: settings.key,
    value: settings.value,
    status: settings.status,
    adminOnly: settings.adminOnly,
    institutionShared: settings.institutionShared,
    editableOthers: settings.editableOthers,
    version: settings.version,
    createdAt: settings.createdAt,
    updatedAt: settings.updatedAt,
  };
}

/**
 * Inserts unless the key already exists in the institution. One statement against the unique index:
 * concurrent duplicates cannot both succeed (the loser waits for the winner's commit on PostgreSQL and
 * then does nothing). `undefined`: the key exists.
 */
export async function insertSettingUnlessDuplicate(db: DbOrTx, row: typeof settings.$inferInsert): Promise<SettingRow | undefined> {
  const [created] = await db.insert(settings).values(row).onConflictDoNothing({ target: [settings.institutionId, settings.key] }).returning();
  return created;
}

export async function findSetting(db: DbOrTx, id: string): Promise<SettingWithAccount | undefined> {
  const [row] = await db.select(withAccount).from(settings).innerJoin(institutions, eq(institutions.id, settings.institutionId)).where(eq(settings.id, id)).limit(1);
  return row;
}

/**
 * Applies a change and increments `__v` in the same statement; with `expectedVersion`, only when the
 * row is still at that revision (optimistic concurrency). `undefined`: gone, or at another revision.
 */
export async function updateSetting(db: DbOrTx, id: string, patch: Partial<typeof settings.$inferInsert>, now: Date, expectedVersion?: number): Promise<SettingRow | undefined> {
  const where = expectedVersion === undefined ? eq(settings.id, id) : and(eq(settings.id, id), eq(settings.version, expectedVersion));
  const [row] = await db
    .update(settings)
    .set({ ...patch, version: sql`${settings.version} + 1`, updatedAt: now })
    .where(where)
    .returning();
  return row;
}

export async function deleteSetting(db: DbOrTx, id: string): Promise<boolean> {
  const rows = await db.delete(settings).where(eq(settings.id, id)).returning({ id: settings.id });
  return rows.length > 0;
}

/** Settings of one institution; `visible` is the policy's condition for the caller. */
export async function listSettings(
  db: DbOrTx,
  filter: { institutionId: string; visible: SQL | undefined; key?: string },
  paging: { limit: number; offset: number },
): Promise<{ rows: SettingRow[]; total: number }> {
  const conditions: SQL[] = [eq(settings.institutionId, filter.institutionId)];
  if (filter.visible) conditions.push(filter.visible);
  if (filter.key !== undefined) conditions.push(eq(settings.key, filter.key));
  const where = and(...conditions);
  const [counted] = await db.select({ n: sql<number>`count(*)::int` }).from(settings).where(where);
  const rows = await db.select().from(settings).where(where).orderBy(asc(settings.key), asc(settings.id)).limit(paging.limit).offset(paging.offset);
  return { rows, total: Number(counted?.n ?? 0) };
}
