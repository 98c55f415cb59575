import { and, eq, sql, type SQL } from 'drizzle-orm';
import { rowsOf, type Db, type DbOrTx } from '../../db/client.js';
import { assistantLikes, assistants, collections, institutions } from '../../db/schema.js';
import { containsInsensitive, inList } from '../../db/search.js';
import type { AuthContext } from '../identity/auth-context.js';
import type { AdminListingScope } from '../tenancy/tenancy.policy.js';
import { visibleCondition } from '../vault/vault.policy.js';
import { assistantVisibleSql, type InstitutionSwitches } from './conversation.policy.js';

export type AssistantRow = typeof assistants.$inferSelect;

/** An assistant with the owner, institution and account fields its presenter shows. */
export interface AssistantView extends AssistantRow {
  ownerEmail: string | null;
  ownerFname: string | null;
  ownerLname: string | null;
  ownerInstitutionId: string | null;
  ownerRole: string | null;
  institutionName: string | null;
  institutionAiname: string | null;
  institutionStatus: string | null;
  institutionPicture: string | null;
  accountName: string;
  accountStatus: string;
  liked: boolean;
}

// the owner's current institution only when it is of the assistant's account: an owner of another account (enrolled
// here by a superadmin) would otherwise tell this tenant the id of an institution of theirs
const VIEW_COLUMNS = sql`a.*, u.email as owner_email, u.fname as owner_fname, u.lname as owner_lname,
  (select oi.id from institutions oi where oi.id = u.current_institution_id and oi.account_id = a.account_id) as owner_institution_id,
  u.role as owner_role, i.name as institution_name, i.ainame as institution_ainame, i.status as institution_status, i.picture as institution_picture,
  ac.name as account_name, ac.status as account_status`;
const VIEW_FROM = sql`assistants a join accounts ac on ac.id = a.account_id
  left join users u on u.id = a.owner_user_id left join institutions i on i.id = a.institution_id`;

type RawView = Record<string, unknown>;

function viewOf(r: RawView): AssistantView {
  return {
    id: r.id as string,
    accountId: r.account_id as string,
    institutionId: (r.institution_id as string | null) ?? null,
    ownerUserId: (r.owner_user_id as string | null) ?? null,
    name: r.name as string,
    description: r.description as string,
    instructions: r.instructions as string,
    pictureUrl: r.picture_url as string,
    likedCount: Number(r.liked_count),
    rememberHistory: Number(r.remember_history),
    historyCount: Number(r.history_count),
    adminOnly: Boolean(r.admin_only),
    institutionShared: Boolean(r.institution_shared),
    editableOthers: Boolean(r.editable_others),
    argument1: r.argument_1 as string,
    argument2: r.argument_2 as string,
    argument3: r.argument_3 as string,
    argument4: r.argument_4 as string,
    argument5: r.argument_5 as string,
    ragCollections: (r.rag_collections as string[]) ?? [],
    assistantToolMode: r.assistant_tool_mode as string,
    assistantTools: (typeof r.assistant_tools === 'string' ? JSON.parse(r.assistant_tools) : r.assistant_tools) as AssistantRow['assistantTools'],
    createdAt: new Date(r.created_at as string),
    updatedAt: new Date(r.updated_at as string),
    ownerEmail: (r.owner_email as string | null) ?? null,
    ownerFname: (r.owner_fname as string | null) ?? null,
    ownerLname: (r.owner_lname as string | null) ?? null,
    ownerInstitutionId: (r.owner_institution_id as string | null) ?? null,
    ownerRole: (r.owner_role as string | null) ?? null,
    institutionName: (r.institution_name as string | null) ?? null,
    institutionAiname: (r.institution_ainame as string | null) ?? null,
    institutionStatus: (r.institution_status as string | null) ?? null,
    institutionPicture: (r.institution_picture as string | null) ?? null,
    accountName: r.account_name as string,
    accountStatus: r.account_status as string,
    liked: Boolean(r.liked),
  };
}

const likedBy = (userId: string) => sql`exists(select 1 from assistant_likes l where l.assistant_id = a.id and l.user_id = ${userId}) as liked`;

export async function findAssistantView(db: DbOrTx, id: string, viewerId: string): Promise<AssistantView | undefined> {
  const rows = await rowsOf<RawView>(db, sql`select ${VIEW_COLUMNS}, ${likedBy(viewerId)} from ${VIEW_FROM} where a.id = ${id}`);
  return rows[0] ? viewOf(rows[0]) : undefined;
}

export async function findAssistant(db: DbOrTx, id: string): Promise<AssistantRow | undefined> {
  const [row] = await db.select().from(assistants).where(eq(assistants.id, id)).limit(1);
  return row;
}

export async function insertAssistant(db: DbOrTx, row: typeof assistants.$inferInsert): Promise<AssistantRow> {
  const [created] = await db.insert(assistants).values(row).returning();
  return created!;
}

export async function updateAssistant(db: DbOrTx, id: string, patch: Partial<typeof assistants.$inferInsert>): Promise<boolean> {
  const rows = await db.update(assistants).set(patch).where(eq(assistants.id, id)).returning({ id: assistants.id });
  return rows.length > 0;
}

export async function deleteAssistant(db: DbOrTx, id: string): Promise<boolean> {
  const rows = await db.delete(assistants).where(eq(assistants.id, id)).returning({ id: assistants.id });
  return rows.length > 0;
}

/**
 * Likes or unlikes, counted once per user: the like row's primary key decides, and liked_count moves
 * in the same transaction only when a row was really inserted or deleted.
 */
export async function setLike(db: Db, assistantId: string, userId: string, like: boolean, now: Date): Promise<number> {
  return db.transaction(async (tx) => {
    const changed = like
      ? await tx.insert(assistantLikes).values({ assistantId, userId, createdAt: now }).onConflictDoNothing().returning({ a: assistantLikes.assistantId })
      : await tx
          .delete(assistantLikes)
          .where(and(eq(assistantLikes.assistantId, assistantId), eq(assistantLikes.userId, userId)))
          .returning({ a: assistantLikes.assistantId });
    const step = changed.length === 0 ? 0 : like ? 1 : -1;
    const [row] = await tx
      .update(assistants)
      .set({ likedCount: sql`${assistants.likedCount} + ${step}` })
      .where(eq(assistants.id, assistantId))
      .returning({ likedCount: assistants.likedCount });
    return row?.likedCount ?? 0;
  });
}

/** Assistants of one institution the caller may see, and its own personal ones (institution null). */
export async function listVisibleAssistants(db: DbOrTx, auth: AuthContext, institutionId: string | null): Promise<AssistantView[]> {
  const where = institutionId
    ? sql`(a.institution_id = ${institutionId} or (a.institution_id is null and a.owner_user_id = ${auth.userId}))`
    : sql`(a.institution_id is null and a.owner_user_id = ${auth.userId})`;
  const rows = await rowsOf<RawView>(
    db,
    sql`select ${VIEW_COLUMNS}, ${likedBy(auth.userId)} from ${VIEW_FROM} where ${where} and ${assistantVisibleSql(auth)} order by lower(a.name), a.id limit 1000`,
  );
  return rows.map(viewOf);
}

export interface AdminAssistantFilter {
  scope: AdminListingScope;
  institutionId?: string;
  accountIds?: string[];
  usersearch?: string;
  adminOnly?: boolean;
  systemOnly?: boolean;
}

export async function listAssistantsForAdmin(db: DbOrTx, filter: AdminAssistantFilter, paging: { limit: number; offset: number }, viewerId: string) {
  const conditions: SQL[] = [];
  const scope = filter.scope.rows;
  if (!scope.all) conditions.push(sql`(${inList(sql.raw('a.account_id'), scope.accountIds)} or ${inList(sql.raw('a.institution_id'), scope.institutionIds)})`);
  if (!filter.scope.superadmins) conditions.push(sql`(a.institution_id is not null or u.role is distinct from 'superadmin')`);
  if (filter.institutionId) conditions.push(sql`a.institution_id = ${filter.institutionId}`);
  if (filter.accountIds) conditions.push(inList(sql.raw('a.account_id'), filter.accountIds));
  if (filter.adminOnly) conditions.push(sql`a.admin_only`);
  if (filter.systemOnly) conditions.push(sql`a.owner_user_id is null`);
  if (filter.usersearch) {
    const t = filter.usersearch;
    conditions.push(sql`(${containsInsensitive(sql.raw('u.email'), t)} or ${containsInsensitive(sql.raw('u.fname'), t)} or ${containsInsensitive(sql.raw('u.lname'), t)})`);
  }
  const where = conditions.length ? sql.join(conditions, sql` and `) : sql`true`;
  const [counted] = await rowsOf<{ n: number }>(db, sql`select count(*)::int as n from ${VIEW_FROM} where ${where}`);
  const rows = await rowsOf<RawView>(
    db,
    sql`select ${VIEW_COLUMNS}, ${likedBy(viewerId)} from ${VIEW_FROM} where ${where} order by a.created_at desc, a.id desc limit ${paging.limit} offset ${paging.offset}`,
  );
  return { rows: rows.map(viewOf), total: Number(counted?.n ?? 0) };
}

export async function findInstitutionSwitches(db: DbOrTx, id: string): Promise<(InstitutionSwitches & { name: string; ainame: string; about: string; status: string; poolCredits: boolean; maxCompletionTokens: number; conversationModel: string | null; toolsDisabled: string[]; publicId: string }) | undefined> {
  const [row] = await db
    .select({
      id: institutions.id,
      accountId: institutions.accountId,
      publicId: institutions.publicId,
      name: institutions.name,
      ainame: institutions.ainame,
      about: institutions.about,
      status: institutions.status,
      poolCredits: institutions.poolCredits,
      maxCompletionTokens: institutions.maxCompletionTokens,
      conversationModel: institutions.conversationModel,
      toolsDisabled: institutions.toolsDisabled,
      disableAssistantsForUser: institutions.disableAssistantsForUser,
      assistantsDisabled: institutions.assistantsDisabled,
    })
    .from(institutions)
    .where(eq(institutions.id, id))
    .limit(1);
  return row;
}

export async function findInstitutionIdByPublicId(db: DbOrTx, publicId: string): Promise<string | undefined> {
  const [row] = await db.select({ id: institutions.id }).from(institutions).where(eq(institutions.publicId, publicId)).limit(1);
  return row?.id;
}

/** The ids among `ids` of collections the caller can see in the vault (the others are refused by the caller). */
export async function visibleCollectionIds(db: DbOrTx, auth: AuthContext, ids: readonly string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await rowsOf<{ id: string }>(
    db,
    sql`select c.id from ${collections} c where ${inList(sql.raw('c.id'), ids)} and ${visibleCondition(auth, 'c', { hasPrivateFlag: false })}`,
  );
  return new Set(rows.map((r) => r.id));
}
