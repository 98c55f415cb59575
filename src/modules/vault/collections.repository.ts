import { sql, type SQL } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { containsInsensitive } from '../../db/search.js';
import { toDate } from '../../db/values.js';
import type { AuthContext } from '../identity/auth-context.js';
import { fileStatusCondition } from './uploads.repository.js';
import type { FileStatusFilter } from './uploads.schemas.js';
import { visibleCondition, type VaultScope } from './vault.policy.js';

/** Where a collection sits and what the policy needs: no counting, cheap enough for every permission check. */
export interface CollectionRef {
  id: string;
  scope: VaultScope;
  parentId: string | null;
  ownerUserId: string;
  institutionId: string | null;
  accountId: string;
}

/** A collection as presented: the row with the number of visible, non-deleted files directly in it. */
export interface CollectionRow extends CollectionRef {
  name: string;
  color: string | null;
  createdAt: Date;
  updatedAt: Date;
  fileCount: number;
}

interface RawRef {
  id: string;
  scope: VaultScope;
  parent_id: string | null;
  owner_user_id: string;
  institution_id: string | null;
  account_id: string;
}

interface RawCollection extends RawRef {
  name: string;
  color: string | null;
  created_at: Date | string;
  updated_at: Date | string;
  file_count: number | string | null;
}

/**
 * One level of the vault tree: the records of one scope that sit together at the root.
 * personal: the caller's own; instance: one institution; account: one account.
 */
export type VaultLevel = { scope: 'personal'; userId: string } | { scope: 'instance'; institutionId: string } | { scope: 'account'; accountId: string };

/** SQL: the record (alias) belongs to the level. Always combined with the policy's visibleCondition. */
export function levelCondition(alias: string, level: VaultLevel): SQL {
  const col = (name: string) => sql.raw(`${alias}.${name}`);
  switch (level.scope) {
    case 'personal':
      return sql`(${col('scope')} = 'personal' and ${col('owner_user_id')} = ${level.userId})`;
    case 'instance':
      return sql`(${col('scope')} = 'instance' and ${col('institution_id')} = ${level.institutionId})`;
    case 'account':
      return sql`(${col('scope')} = 'account' and ${col('account_id')} = ${level.accountId})`;
  }
}

export const anyOf = (conditions: SQL[]): SQL => (conditions.length === 0 ? sql`false` : sql`(${sql.join(conditions, sql` or `)})`);

/** fileCount: files directly in the collection (not in its sub-collections), visible to the caller, not deleted. */
const fileCount = (auth: AuthContext) =>
  sql`(select count(*)::int from uploads u where u.collection_id = c.id and ${fileStatusCondition(sql.raw('u.status'))} and ${visibleCondition(auth, 'u', { hasPrivateFlag: true })})`;

const refOf = (r: RawRef): CollectionRef => ({
  id: r.id,
  scope: r.scope,
  parentId: r.parent_id,
  ownerUserId: r.owner_user_id,
  institutionId: r.institution_id,
  accountId: r.account_id,
});

const rowOf = (r: RawCollection): CollectionRow => ({
  ...refOf(r),
  name: r.name,
  color: r.color,
  createdAt: toDate(r.created_at),
  updatedAt: toDate(r.updated_at),
  fileCount: Number(r.file_count ?? 0),
});

export type RowLock = 'update' | 'share';

/**
 * The collection if the caller may see it, without counting its files (permission checks, moves,
 * placing a file). Inside a transaction, `lock` takes a row lock until it ends: `share` for whoever
 * puts something into the collection (a file, a sub-collection), `update` for whoever moves or deletes
 * it — so a delete waits for those, or they find the collection gone.
 */
export async function findVisibleCollection(db: DbOrTx, auth: AuthContext, id: string, options: { lock?: RowLock } = {}): Promise<CollectionRef | undefined> {
  const lock = options.lock === 'update' ? sql`for update of c` : options.lock === 'share' ? sql`for share of c` : sql``;
  const rows = await rowsOf<RawRef>(
    db,
    sql`select c.id, c.scope, c.parent_id, c.owner_user_id, c.institution_id, c.account_id
          from collections c
         where c.id = ${id} and ${visibleCondition(auth, 'c', { hasPrivateFlag: false })}
         ${lock}`,
  );
  return rows[0] ? refOf(rows[0]) : undefined;
}

/** The visible collection as presented, with its fileCount. */
export async function getVisibleCollection(db: DbOrTx, auth: AuthContext, id: string): Promise<CollectionRow | undefined> {
  const rows = await rowsOf<RawCollection>(
    db,
    sql`select c.*, ${fileCount(auth)} as file_count
          from collections c
         where c.id = ${id} and ${visibleCondition(auth, 'c', { hasPrivateFlag: false })}`,
  );
  return rows[0] ? rowOf(rows[0]) : undefined;
}

/** Visible collections directly under `parentId` (or at the root of the given levels when null), by name. */
export async function listVisibleChildren(db: DbOrTx, auth: AuthContext, where: { parentId: string } | { levels: VaultLevel[] }): Promise<CollectionRow[]> {
  const placement = 'parentId' in where ? sql`c.parent_id = ${where.parentId}` : sql`c.parent_id is null and ${anyOf(where.levels.map((l) => levelCondition('c', l)))}`;
  const rows = await rowsOf<RawCollection>(
    db,
    sql`select c.*, ${fileCount(auth)} as file_count
          from collections c
         where ${placement} and ${visibleCondition(auth, 'c', { hasPrivateFlag: false })}
         order by lower(c.name), c.id`,
  );
  return rows.map(rowOf);
}

export interface NewCollection {
  id: string;
  name: string;
  color: string | null;
  scope: VaultScope;
  parentId: string | null;
  ownerUserId: string;
  institutionId: string | null;
  accountId: string;
  now: Date;
}

export async function insertCollection(db: DbOrTx, c: NewCollection): Promise<void> {
  await db.execute(
    sql`insert into collections (id, name, color, scope, parent_id, owner_user_id, institution_id, account_id, created_at, updated_at)
        values (${c.id}, ${c.name}, ${c.color}, ${c.scope}, ${c.parentId}, ${c.ownerUserId}, ${c.institutionId}, ${c.accountId},
                ${c.now.toISOString()}, ${c.now.toISOString()})`,
  );
}

export interface CollectionPatch {
  name?: string;
  color?: string | null;
  parentId?: string | null;
}

export async function updateCollection(db: DbOrTx, id: string, patch: CollectionPatch, now: Date): Promise<void> {
  const sets: SQL[] = [sql`updated_at = ${now.toISOString()}`];
  if (patch.name !== undefined) sets.push(sql`name = ${patch.name}`);
  if (patch.color !== undefined) sets.push(sql`color = ${patch.color}`);
  if (patch.parentId !== undefined) sets.push(sql`parent_id = ${patch.parentId}`);
  await db.execute(sql`update collections set ${sql.join(sets, sql`, `)} where id = ${id}`);
}

/**
 * Whether `candidateId` is `ancestorId` or lies beneath it, i.e. whether making `candidateId` the parent
 * of `ancestorId` would close a cycle. Walks up from the candidate; UNION (not UNION ALL) stops even on
 * a cycle that somehow already exists.
 */
export async function isSelfOrDescendant(db: DbOrTx, candidateId: string, ancestorId: string): Promise<boolean> {
  const [row] = await rowsOf<{ hit: boolean }>(
    db,
    sql`with recursive up(id, parent_id) as (
          select id, parent_id from collections where id = ${candidateId}
          union
          select c.id, c.parent_id from collections c join up on c.id = up.parent_id
        )
        select exists(select 1 from up where id = ${ancestorId}) as hit`,
  );
  return Boolean(row?.hit);
}

/**
 * Serialises tree moves inside one account, so that two concurrent moves (A under B, B under A) cannot
 * both pass the cycle check. Held until the transaction ends.
 */
export async function lockTreeOfAccount(tx: DbOrTx, accountId: string): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${`vault-collections:${accountId}`}))`);
}

/**
 * Deletes a collection: its files (whatever their status, whoever may see them) and its sub-collections
 * move to its parent (null: the vault root). `movedFiles` counts the files the caller may see: another
 * member's private files move too, and their number is not told. Run inside a transaction.
 */
export async function deleteCollectionMovingContent(
  tx: DbOrTx,
  auth: AuthContext,
  id: string,
  parentId: string | null,
  now: Date,
): Promise<{ movedFiles: number; movedCollections: number }> {
  const files = await rowsOf<{ seen: boolean }>(
    tx,
    sql`update uploads as u set collection_id = ${parentId}, updated_at = ${now.toISOString()} where u.collection_id = ${id}
        returning ${visibleCondition(auth, 'u', { hasPrivateFlag: true })} as seen`,
  );
  const children = await rowsOf<{ id: string }>(tx, sql`update collections set parent_id = ${parentId}, updated_at = ${now.toISOString()} where parent_id = ${id} returning id`);
  await tx.execute(sql`delete from collections where id = ${id}`);
  return { movedFiles: files.filter((f) => f.seen).length, movedCollections: children.length };
}

// ───────────── select-all-ids ─────────────

export interface FileSelection {
  /** The collection whose files are listed, or null for the files at the root of `level`. */
  parentId: string | null;
  level?: VaultLevel;
  fileNameSearch?: string;
  status?: FileStatusFilter;
}

/** Visible files directly at one place of the tree, filtered; ordered by name. */
export async function selectFiles(db: DbOrTx, auth: AuthContext, s: FileSelection): Promise<Array<{ id: string; originalname: string }>> {
  const conditions: SQL[] = [visibleCondition(auth, 'u', { hasPrivateFlag: true })];
  if (s.parentId) conditions.push(sql`u.collection_id = ${s.parentId}`);
  else {
    conditions.push(sql`u.collection_id is null`);
    conditions.push(s.level ? levelCondition('u', s.level) : sql`false`);
  }
  conditions.push(fileStatusCondition(sql.raw('u.status'), s.status));
  if (s.fileNameSearch) conditions.push(containsInsensitive(sql.raw('u.originalname'), s.fileNameSearch));
  return rowsOf<{ id: string; originalname: string }>(
    db,
    sql`select u.id, u.originalname from uploads u where ${sql.join(conditions, sql` and `)} order by lower(u.originalname), u.id`,
  );
}
