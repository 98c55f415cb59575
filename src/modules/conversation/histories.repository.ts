import { and, eq, sql, type SQL } from 'drizzle-orm';
import { rowsOf, type DbOrTx } from '../../db/client.js';
import { histories } from '../../db/schema.js';
import { containsInsensitive, inList, textArray } from '../../db/search.js';
import type { AdminListingScope } from '../tenancy/tenancy.policy.js';

export type HistoryRow = typeof histories.$inferSelect;

/**
 * Saves a record. Its assistant is kept only if it still exists: one deleted while the answer was being
 * made leaves the record without it (what ON DELETE SET NULL does to the records saved before), instead of
 * failing the commit that pays for the answer.
 */
export async function insertHistory(db: DbOrTx, row: typeof histories.$inferInsert): Promise<void> {
  const assistantId = row.assistantId ? sql`(select a.id from assistants a where a.id = ${row.assistantId})` : null;
  await db.insert(histories).values({ ...row, assistantId });
}

export async function findHistory(db: DbOrTx, id: string): Promise<HistoryRow | undefined> {
  const [row] = await db.select().from(histories).where(eq(histories.id, id)).limit(1);
  return row;
}

export async function updateHistory(db: DbOrTx, id: string, userId: string, patch: Partial<typeof histories.$inferInsert>): Promise<HistoryRow | undefined> {
  const [row] = await db
    .update(histories)
    .set(patch)
    .where(and(eq(histories.id, id), eq(histories.userId, userId)))
    .returning();
  return row;
}

/**
 * The previous turns of a thread: successful, not forgotten records of the same user, institution,
 * course and assistant; the newest `count`, returned oldest first.
 */
export async function threadTurns(
  db: DbOrTx,
  thread: { userId: string; institutionId: string | null; courseId: number | null; assistantId: string | null },
  count: number,
): Promise<Array<{ input: string; output: string }>> {
  if (count <= 0) return [];
  const rows = await rowsOf<{ input: string; outputs: string[] }>(
    db,
    sql`select input, outputs from histories
         where user_id = ${thread.userId}
           and institution_id is not distinct from ${thread.institutionId}
           and course_id is not distinct from ${thread.courseId}
           and assistant_id is not distinct from ${thread.assistantId}
           and success and not forgotten
         order by created_at desc, id desc limit ${count}`,
  );
  return rows.reverse().map((r) => ({ input: r.input, output: (r.outputs ?? []).join('\n') }));
}

/** A history row with what the listing presents (assistant and institution summaries). */
export interface HistoryView extends Record<string, unknown> {
  id: string;
  user_id: string;
  institution_id: string | null;
  assistant_id: string | null;
  course_id: string | number | null;
  course_name: string | null;
  input: string;
  inputs: string[];
  outputs: string[];
  tool_calls: unknown;
  credits: string | number;
  usage: number;
  discount: string | number;
  favorite: boolean;
  forgotten: boolean;
  role_id: string;
  role_name: string;
  thumb_up_down: string | null;
  feedback: string | null;
  conversation_model: string;
  success: boolean;
  error_message: string | null;
  experimental: boolean;
  prompt_mode: string;
  streaming_failed: boolean;
  query_duration_ms: number;
  created_at: string | Date;
  a_name: string | null;
  a_liked_count: number | null;
  a_picture_url: string | null;
  i_name: string | null;
  i_ainame: string | null;
  i_picture: string | null;
}

const VIEW = sql`select h.*, a.name as a_name, a.liked_count as a_liked_count, a.picture_url as a_picture_url,
                        i.name as i_name, i.ainame as i_ainame, i.picture as i_picture
                   from histories h left join assistants a on a.id = h.assistant_id left join institutions i on i.id = h.institution_id`;

export interface HistoryQuery {
  userId: string;
  /**
   * The institution of the records (null: the personal space). Not given: with `institutionIds`, those
   * institutions plus the personal space; without them, any institution (only for a `historyId`
   * lookup: the `userId` condition still keeps the records the caller's own).
   */
  institutionId?: string | null;
  /** allInstitutions: these institutions plus personal records. */
  institutionIds?: readonly string[];
  courseId?: number;
  before?: Date;
  after?: Date;
  historyId?: string;
  /** A validated regular expression (Postgres ARE, case-insensitive). */
  search?: string;
  limit: number;
}

function scopeConditions(q: HistoryQuery): SQL[] {
  const c: SQL[] = [sql`h.user_id = ${q.userId}`];
  if (q.institutionIds) c.push(sql`(h.institution_id is null or ${inList(sql.raw('h.institution_id'), q.institutionIds)})`);
  else if (q.institutionId !== undefined) c.push(q.institutionId ? sql`h.institution_id = ${q.institutionId}` : sql`h.institution_id is null`);
  else if (!q.historyId) throw new Error('listHistories: an institution scope is required unless one record is looked up by id');
  if (q.courseId !== undefined && !q.institutionIds) {
    c.push(q.courseId === 0 ? sql`(h.course_id = 0 or h.course_id is null)` : sql`h.course_id = ${q.courseId}`);
  }
  if (q.before) c.push(sql`h.created_at < ${q.before.toISOString()}::timestamptz`);
  if (q.after) c.push(sql`h.created_at > ${q.after.toISOString()}::timestamptz`);
  if (q.historyId) c.push(sql`h.id = ${q.historyId}`);
  return c;
}

/**
 * A regex search is matched a page at a time, never over a whole history in one statement: the engine runs
 * one statement at a time for every tenant, and matching costs up to ~4 µs a character for the largest
 * automaton a search may ask for (`([ab]{240}a){4}c` over 90,000 characters: 0.38 s). A page is at most
 * SEARCH_PAGE_CHARS of text (a record larger than that is matched a slice of its strings at a time), so
 * no statement of a search holds the engine for more than a fraction of a second, other requests'
 * statements run between pages, and the search stops with SearchBudgetExceeded after SEARCH_BUDGET_MS.
 */
export const SEARCH_PAGE_CHARS = 64 * 1024;
const SEARCH_BUDGET_MS = 5_000;
/** Records whose text sizes one statement reads while a search pages through a history. */
const SEARCH_SIZE_WINDOW = 1_000;

export class SearchBudgetExceeded extends Error {
  constructor(readonly budgetMs: number) {
    super(`the search did not finish in ${budgetMs} ms`);
  }
}

/** The strings a search matches in a record, in one array: the input, then the inputs, then the outputs. */
const SEARCHED = sql`(array[h.input] || coalesce(h.inputs, '{}') || coalesce(h.outputs, '{}'))`;

/** The end (exclusive) of the page that starts at `from`: items while their text fits in SEARCH_PAGE_CHARS, at least one. */
function pageEnd(items: ReadonlyArray<{ chars: number | string }>, from: number): number {
  let end = from;
  for (let chars = 0; end < items.length && (end === from || chars + Number(items[end]!.chars) <= SEARCH_PAGE_CHARS); end++) chars += Number(items[end]!.chars);
  return end;
}

/** A search's clock: the first page always runs; after it, a page starts only within the budget. */
function budgetClock(budgetMs: number): () => void {
  const started = performance.now();
  let first = true;
  return () => {
    if (!first && performance.now() - started > budgetMs) throw new SearchBudgetExceeded(budgetMs);
    first = false;
  };
}

/**
 * Ids of the records in scope that the pattern matches, newest first: the first `limit` of them, and how many
 * there are in all when `countAll` (else the count stops with the page that filled the limit). `scanned`
 * is the number of records in scope read; with `countAll`, every one of them.
 */
async function searchPages(db: DbOrTx, scope: SQL[], pattern: string, limit: number, countAll: boolean, budgetMs: number): Promise<{ ids: string[]; total: number; scanned: number }> {
  const nextPage = budgetClock(budgetMs);
  const ids: string[] = [];
  let total = 0;
  let scanned = 0;
  let cursor: { at: string; id: string } | undefined;
  for (;;) {
    const after = cursor ? [sql`(h.created_at, h.id) < (${cursor.at}::timestamptz, ${cursor.id})`] : [];
    const window = await rowsOf<{ id: string; at: string; chars: number | string }>(
      db,
      sql`select h.id, h.created_at::text as at, (select coalesce(sum(octet_length(x)), 0) from unnest(${SEARCHED}) x)::bigint as chars
            from histories h where ${sql.join([...scope, ...after], sql` and `)}
           order by h.created_at desc, h.id desc limit ${SEARCH_SIZE_WINDOW}`,
    );
    scanned += window.length;
    for (let i = 0; i < window.length; ) {
      const end = pageEnd(window, i);
      const page = window.slice(i, end);
      i = end;
      const hits = await pageMatches(db, page, pattern, nextPage);
      for (const r of page) {
        if (!hits.has(r.id)) continue;
        total++;
        if (ids.length < limit) ids.push(r.id);
      }
      if (!countAll && ids.length >= limit) return { ids, total, scanned };
    }
    if (window.length < SEARCH_SIZE_WINDOW) return { ids, total, scanned };
    const last = window[window.length - 1]!;
    cursor = { at: last.at, id: last.id };
  }
}

/** The records of a page that the pattern matches: in one statement, or a large record alone a slice of its strings at a time. */
async function pageMatches(db: DbOrTx, page: ReadonlyArray<{ id: string; chars: number | string }>, pattern: string, nextPage: () => void): Promise<Set<string>> {
  if (page.length === 1 && Number(page[0]!.chars) > SEARCH_PAGE_CHARS) {
    return (await matchesInSlices(db, page[0]!.id, pattern, nextPage)) ? new Set([page[0]!.id]) : new Set();
  }
  nextPage();
  const rows = await rowsOf<{ id: string }>(
    db,
    sql`select h.id from histories h where h.id = any(${textArray(page.map((r) => r.id))}::text[]) and exists(select 1 from unnest(${SEARCHED}) x where x ~* ${pattern})`,
  );
  return new Set(rows.map((r) => r.id));
}

/** Whether the pattern matches one large record, its strings matched SEARCH_PAGE_CHARS at a time (one string more at most). */
async function matchesInSlices(db: DbOrTx, id: string, pattern: string, nextPage: () => void): Promise<boolean> {
  const sizes = await rowsOf<{ n: number | string; chars: number | string }>(
    db,
    sql`select e.n, octet_length(e.x)::bigint as chars from histories h, unnest(${SEARCHED}) with ordinality e(x, n) where h.id = ${id} order by e.n`,
  );
  for (let i = 0; i < sizes.length; ) {
    const end = pageEnd(sizes, i);
    nextPage();
    const [hit] = await rowsOf<{ hit: boolean }>(
      db,
      sql`select exists(select 1 from histories h, unnest(${SEARCHED}) with ordinality e(x, n)
                         where h.id = ${id} and e.n between ${Number(sizes[i]!.n)} and ${Number(sizes[end - 1]!.n)} and e.x ~* ${pattern}) as hit`,
    );
    if (hit?.hit) return true;
    i = end;
  }
  return false;
}

export async function listHistories(db: DbOrTx, q: HistoryQuery, withTotals: boolean, budgetMs = SEARCH_BUDGET_MS) {
  const scope = scopeConditions(q);
  const where = sql.join(scope, sql` and `);
  const order = sql`order by h.created_at desc, h.id desc`;
  // Newest first, then reversed by the caller: the page holds the newest `limit` records.
  const found = q.search ? await searchPages(db, scope, q.search, q.limit, withTotals, budgetMs) : undefined;
  const rows = !found
    ? await rowsOf<HistoryView>(db, sql`${VIEW} where ${where} ${order} limit ${q.limit}`)
    : found.ids.length > 0
      ? await rowsOf<HistoryView>(db, sql`${VIEW} where h.id = any(${textArray(found.ids)}::text[]) ${order}`)
      : [];
  if (!withTotals) return { rows, total: undefined, totalInScope: undefined };
  if (found) return { rows, total: found.total, totalInScope: found.scanned }; // the search read every record in scope
  const [t] = await rowsOf<{ n: number }>(db, sql`select count(*)::int as n from histories h where ${where}`);
  const inScope = Number(t?.n ?? 0);
  return { rows, total: inScope, totalInScope: inScope };
}

export interface FeedbackFilter {
  scope: AdminListingScope;
  institutionId?: string;
  accountIds?: string[];
  usersearch?: string;
}

/** Records with a thumb or feedback text, for POST /api/admin/feedbacks. */
export async function listFeedbacks(db: DbOrTx, f: FeedbackFilter, paging: { limit: number; offset: number }) {
  const c: SQL[] = [sql`(h.thumb_up_down is not null or h.feedback is not null)`];
  const scope = f.scope.rows;
  if (!scope.all) c.push(sql`(${inList(sql.raw('h.account_id'), scope.accountIds)} or ${inList(sql.raw('h.institution_id'), scope.institutionIds)})`);
  if (!f.scope.superadmins) c.push(sql`u.role <> 'superadmin'`);
  if (f.institutionId) c.push(sql`h.institution_id = ${f.institutionId}`);
  if (f.accountIds) c.push(inList(sql.raw('h.account_id'), f.accountIds));
  if (f.usersearch) {
    const t = f.usersearch;
    c.push(sql`(${containsInsensitive(sql.raw('u.email'), t)} or ${containsInsensitive(sql.raw('u.fname'), t)} or ${containsInsensitive(sql.raw('u.lname'), t)})`);
  }
  const where = sql.join(c, sql` and `);
  const from = sql`histories h join users u on u.id = h.user_id left join assistants a on a.id = h.assistant_id left join institutions i on i.id = h.institution_id`;
  const [counted] = await rowsOf<{ n: number }>(db, sql`select count(*)::int as n from ${from} where ${where}`);
  const rows = await rowsOf<HistoryView & { u_email: string; u_fname: string; u_lname: string; account_id: string }>(
    db,
    sql`select h.*, u.email as u_email, u.fname as u_fname, u.lname as u_lname, a.name as a_name, a.liked_count as a_liked_count,
               a.picture_url as a_picture_url, i.name as i_name, i.ainame as i_ainame, i.picture as i_picture
          from ${from} where ${where} order by h.created_at desc, h.id desc limit ${paging.limit} offset ${paging.offset}`,
  );
  return { rows, total: Number(counted?.n ?? 0) };
}
