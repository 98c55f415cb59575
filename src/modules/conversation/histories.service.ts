import { sql } from 'drizzle-orm';
import type { AppContext } from '../../context.js';
import { rowsOf } from '../../db/client.js';
import { badField } from '../../shared/errors.js';
import { isUuid } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import { assertOwnHistory, feedbackListingScope } from './conversation.policy.js';
import * as repo from './histories.repository.js';
import type { FeedbacksInput, HistoriesInput, PatchHistoryInput } from './histories.schemas.js';
import { regexSize } from './regex-size.js';
import { searchTerm } from '../../db/search.js';

/** Long strings of inputs and outputs are trimmed to this many characters in listings. */
export const TRIM_CHARS = 200;
/** Tool responses are cut to this many characters unless `tools: true`. */
export const TOOL_RESPONSE_CHARS = 80;

/** The first n characters (code points: a character outside the BMP is not cut in half). */
export const trim = (s: string, n: number) => {
  if (s.length <= n) return s;
  let end = 0;
  for (let count = 0; count < n && end < s.length; count++) end += s.codePointAt(end)! > 0xffff ? 2 : 1;
  return s.slice(0, end);
};

function assistantOf(r: repo.HistoryView) {
  return r.assistant_id && r.a_name !== null
    ? { _id: r.assistant_id, name: r.a_name, liked_count: Number(r.a_liked_count ?? 0), picture_url: r.a_picture_url ?? '' }
    : null;
}

function institutionObject(r: repo.HistoryView) {
  return r.institution_id ? { _id: r.institution_id, name: r.i_name ?? '', ainame: r.i_ainame ?? '', picture: r.i_picture ?? '' } : null;
}

export function presentHistory(r: repo.HistoryView, options: { full: boolean; tools: boolean; institutionObjects: boolean }) {
  const cut = (s: string) => (options.full ? s : trim(s, TRIM_CHARS));
  const toolCalls = (typeof r.tool_calls === 'string' ? JSON.parse(r.tool_calls) : r.tool_calls) as Array<{ tool: string; arguments: unknown; response: string }>;
  return {
    id: r.id,
    created: new Date(r.created_at).toISOString(),
    credits: Number(r.credits),
    usage: Number(r.usage),
    discount: Number(r.discount),
    institution: options.institutionObjects ? (institutionObject(r) ?? { personal: true as const }) : (r.institution_id ?? ''),
    user: r.user_id,
    favorite: r.favorite,
    forgotten: r.forgotten,
    role_id: r.role_id,
    role_name: r.role_name,
    thumbUpDown: r.thumb_up_down,
    feedback: r.feedback,
    conversation_model: r.conversation_model,
    success: r.success,
    in: { input: cut(r.input), inputs: (r.inputs ?? []).map(cut) },
    out: { outputs: (r.outputs ?? []).map(cut) },
    assistant: assistantOf(r),
    course_id: r.course_id === null ? null : Number(r.course_id),
    course_name: r.course_name,
    tools: (toolCalls ?? []).map((t) => ({ tool: t.tool, arguments: t.arguments, response: options.tools ? t.response : trim(t.response, TOOL_RESPONSE_CHARS) })),
    ...(r.experimental ? { experimental: true, promptMode: r.prompt_mode } : {}),
    streamingFailed: r.streaming_failed,
    query_duration_ms: Number(r.query_duration_ms),
    ...(r.success ? {} : { error: r.error_message ?? 'The turn failed' }),
  };
}

/** Back-references are the one construct that makes Postgres' regex engine exponential: refused. */
const BACKREFERENCE = /\\[1-9]/u;
/**
 * What a pattern may start with that changes how Postgres reads the rest: a director (`***:` ARE, `***=`
 * literal) and then embedded options `(?letters)`. Options b (basic), e (extended) and x (expanded: white
 * space and # comments ignored) change the syntax regexSize reads — `{0,25 5}` is {0,255} in x mode, a
 * bound is `\{m,n\}` in b mode — so a pattern with them could hide an automaton of any size: refused.
 */
const PREFIX = /^(?:\*\*\*[:=])?(?:\(\?([a-zA-Z]*)\))?/u;
const OTHER_SYNTAX = /[bex]/u;
/**
 * The largest automaton a search may ask for (regex-size.ts): Postgres expands counted repetitions when it
 * compiles, and nested ones multiply. At this size compiling takes tens of milliseconds on the embedded engine;
 * `(.{0,255}){0,255}` (65,025) held it for minutes, every tenant's requests waiting behind it.
 */
export const MAX_REGEX_SIZE = 1_000;

export class HistoriesService {
  constructor(private readonly ctx: AppContext) {}

  /**
   * A `search` is a Postgres regular expression (ARE), matched case-insensitively. It is compiled by
   * the database first, so an invalid one is a 400 before any record is read; back-references are
   * refused (400), and so is a pattern whose counted repetitions expand to an automaton larger than
   * MAX_REGEX_SIZE (nested `{m,n}` multiply when Postgres compiles them). With both, and at most 200
   * characters, compiling and matching stay bounded (the engine is a DFA/NFA hybrid without catastrophic
   * backtracking otherwise).
   */
  private async checkPattern(pattern: string): Promise<void> {
    if (BACKREFERENCE.test(pattern)) throw badField('search', 'search may not use back-references (\\1 … \\9)');
    const options = PREFIX.exec(pattern)?.[1];
    if (options && OTHER_SYNTAX.test(options)) {
      throw badField('search', 'search may not switch to another regular expression syntax with the embedded options b, e or x: write it in the default (ARE) syntax');
    }
    const size = regexSize(pattern);
    if (size > MAX_REGEX_SIZE) {
      throw badField('search', `search repeats too much: its counted repetitions ({m,n}) expand to about ${size} copies of what they repeat (at most ${MAX_REGEX_SIZE}; nested ones multiply)`);
    }
    try {
      await rowsOf(this.ctx.db, sql`select '' ~* ${pattern} as ok`);
    } catch (err) {
      // the engine's own reason (drizzle wraps it in an error that names the query instead)
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      const code = (err as { code?: string }).code ?? cause?.code;
      const message = cause?.message ?? (err as Error).message ?? '';
      if (code === '2201B' || /regular expression/iu.test(message)) throw badField('search', `search is not a valid regular expression (${message.replace(/^invalid regular expression:\s*/iu, '').slice(0, 200)})`);
      throw err;
    }
  }

  async list(auth: AuthContext, input: HistoriesInput) {
    // the empty pattern matches every record: no filter
    const search = input.search === '' ? undefined : input.search;
    if (search !== undefined) await this.checkPattern(search);
    const all = input.allInstitutions === true;
    // Only the caller's own records are ever read (user_id filter), whatever institution is named.
    // One record asked by id is found wherever it was asked (another institution, the personal space,
    // before an institution switch), unless `institution` (or allInstitutions) narrows it explicitly.
    const byIdAnywhere = input.historyId !== undefined && input.institution === undefined && !all;
    const institutionId = input.institution === undefined ? auth.institutionId : input.institution;
    const query: repo.HistoryQuery = {
      userId: auth.userId,
      ...(all ? { institutionIds: [...auth.memberships.keys()] } : byIdAnywhere ? {} : { institutionId: institutionId ?? null }),
      courseId: input.course_id,
      before: input.before !== undefined ? new Date(input.before) : undefined,
      after: input.after !== undefined ? new Date(input.after) : undefined,
      historyId: input.historyId,
      search,
      limit: input.limit ?? 100,
    };
    const { rows, total, totalInScope } = await repo.listHistories(this.ctx.db, query, all).catch((err: unknown) => {
      if (err instanceof repo.SearchBudgetExceeded) {
        throw badField('search', `search did not finish in ${err.budgetMs / 1000} s over this history: narrow it (before, after, institution, course_id) or use a simpler pattern`);
      }
      throw err;
    });
    const data = rows.reverse().map((r) => presentHistory(r, { full: false, tools: input.tools === true, institutionObjects: all }));
    return { success: true, data, ...(all ? { total, totalInScope } : {}) };
  }

  async update(auth: AuthContext, id: string, input: PatchHistoryInput) {
    const current = await repo.findHistory(this.ctx.db, id);
    assertOwnHistory(auth, current);
    const patch: Record<string, unknown> = {};
    if (input.favorite !== undefined) patch.favorite = input.favorite;
    if (input.forgotten !== undefined) patch.forgotten = input.forgotten;
    if (input.thumbUpDown !== undefined) patch.thumbUpDown = input.thumbUpDown;
    if (input.feedback !== undefined) patch.feedback = input.feedback === null || input.feedback.trim() === '' ? null : input.feedback;
    if (Object.keys(patch).length) await repo.updateHistory(this.ctx.db, id, auth.userId, { ...patch, updatedAt: this.ctx.clock.now() });
    const { rows } = await repo.listHistories(this.ctx.db, { userId: auth.userId, institutionIds: [...auth.memberships.keys(), ...(current!.institutionId ? [current!.institutionId] : [])], historyId: id, limit: 1 }, false);
    return presentHistory(rows[0]!, { full: true, tools: true, institutionObjects: false });
  }

  async feedbacks(auth: AuthContext, input: FeedbacksInput) {
    const scope = feedbackListingScope(auth);
    const { page, pageSize, limit, offset } = pageWindow({ page: input.page, pageSize: input.pageSize ?? input.limitsearch });
    const accountIds = input.account?.split(/\s+/u).filter(Boolean);
    if (accountIds?.some((id) => !isUuid(id))) throw badField('account', 'account must be space-separated account ids');
    const { rows, total } = await repo.listFeedbacks(
      this.ctx.db,
      { scope, institutionId: input.institution, accountIds: accountIds?.length ? accountIds : undefined, usersearch: searchTerm(input.usersearch) },
      { limit, offset },
    );
    const data = rows.map((r) => ({
      _id: r.id,
      created: new Date(r.created_at).toISOString(),
      user: { _id: r.user_id, email: r.u_email, fname: r.u_fname, lname: r.u_lname },
      account: r.account_id,
      institution: institutionObject(r),
      assistant: assistantOf(r),
      thumbUpDown: r.thumb_up_down,
      feedback: r.feedback,
      in: { input: trim(r.input, TRIM_CHARS) },
      out: { outputs: (r.outputs ?? []).map((o) => trim(o, TRIM_CHARS)) },
      conversation_model: r.conversation_model,
      success: r.success,
    }));
    return envelope(data, total, page, pageSize);
  }
}
