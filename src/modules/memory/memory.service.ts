import type { AppContext } from '../../context.js';
import { badField, notFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import { findUserById } from '../identity/identity.repository.js';
import { findInstitution } from '../tenancy/tenancy.repository.js';
import {
  adminMay,
  assertAdministersInstitution,
  assertAdministersUser,
  assertChangeSharing,
  assertEdit,
  canEdit,
  isAuthor,
  MEMORY_DELETE,
  MEMORY_READ,
  sharedPlacement,
} from './memory.policy.js';
import { AnswerMemo, MemoryCache } from './memory.cache.js';
import { presentMemory, presentMemoryInstitution, presentMemoryJson } from './memory.presenters.js';
import * as repo from './memory.repository.js';
import type { BulkDeleteInput, CreateMemoryInput, UpdateMemoryInput } from './memory.schemas.js';

function trimmed(field: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const t = value.trim();
  if (!t) throw badField(field, `${field} must not be blank`);
  return t;
}

type Placement = Pick<repo.MemoryRow, 'authorUserId' | 'shared' | 'institutionId'>;

/** Newest first, then by id (ids are UUIDv7: time-ordered), as the database orders them. */
export const newestFirst = (a: repo.MemoryWithInstitution, b: repo.MemoryWithInstitution) =>
  b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);

type Rows = readonly repo.MemoryWithInstitution[];

const isNewestFirst = (rows: Rows) => rows.every((r, i) => i === 0 || newestFirst(rows[i - 1]!, r) <= 0);

/** Two newest-first lists as one; on a tie the first list's row comes first, as in a stable sort. */
function mergeTwo(a: Rows, b: Rows): Rows {
  const out: repo.MemoryWithInstitution[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) out.push(newestFirst(a[i]!, b[j]!) <= 0 ? a[i++]! : b[j++]!);
  while (i < a.length) out.push(a[i++]!);
  while (j < b.length) out.push(b[j++]!);
  return out;
}

/**
 * The caller's lists (personal first, then one per institution) as one, newest first, at most
 * USER_MEMORY_LIMIT rows. Each list comes newest first from the database, so they are merged
 * (pairwise, in rounds) instead of sorted: the same order as sorting their concatenation, at a tenth
 * of the cost; sorting on every request was the largest cost left in the route's own code once rows
 * were serialized once. A list not in newestFirst's order (the database compares microseconds,
 * newestFirst milliseconds) falls back to the sort.
 */
export function mergeNewestFirst(parts: readonly Rows[]): Rows {
  if (parts.length === 1) return parts[0]!;
  if (!parts.every(isNewestFirst)) return parts.flat().sort(newestFirst).slice(0, repo.USER_MEMORY_LIMIT);
  let runs = parts;
  while (runs.length > 1) {
    const next: Rows[] = [];
    for (let i = 0; i < runs.length; i += 2) next.push(i + 1 < runs.length ? mergeTwo(runs[i]!, runs[i + 1]!) : runs[i]!);
    runs = next;
  }
  const rows = runs[0]!;
  return rows.length > repo.USER_MEMORY_LIMIT ? rows.slice(0, repo.USER_MEMORY_LIMIT) : rows;
}

export class MemoryService {
  readonly cache: MemoryCache;
  /** The last answer of GET /api/user/memory of each session while it stands (AnswerMemo). */
  private readonly answers = new AnswerMemo<AuthContext['memberships']>();

  constructor(private readonly ctx: AppContext) {
    this.cache = new MemoryCache(ctx.invalidation, ctx.clock);
  }

  /** Tells the caches (of every node, with a shared bus) which lists a write changed. */
  private async announce(rows: readonly Placement[]): Promise<void> {
    const personal = new Set<string>();
    const shared = new Set<string>();
    for (const r of rows) {
      if (r.shared && r.institutionId) shared.add(r.institutionId);
      else personal.add(r.authorUserId);
    }
    for (const id of personal) await this.ctx.invalidation.publish('memory-personal', { id });
    for (const id of shared) await this.ctx.invalidation.publish('memory-shared', { id });
  }

  private get db() {
    return this.ctx.db;
  }

  private present(auth: AuthContext, row: repo.MemoryWithInstitution) {
    return presentMemory(row, { editable: canEdit(auth, row), isAuthor: isAuthor(auth, row) });
  }

  /**
   * The caller's lists: personal rows first, then the shared rows of each institution it belongs to (from
   * its authenticated context), each from the cache when it has it, else one prepared statement.
   */
  private visibleParts(auth: AuthContext): Rows[] | Promise<Rows[]> {
    const parts: Array<Rows | Promise<Rows>> = [this.cache.personalOf(auth.userId, () => repo.listPersonalOf(this.db, auth.userId))];
    for (const id of auth.memberships.keys()) parts.push(this.cache.sharedOf(id, () => repo.listSharedOf(this.db, id)));
    return parts.some((p) => p instanceof Promise) ? Promise.all(parts) : (parts as Rows[]);
  }

  /**
   * The answer of GET /api/user/memory, serialized and encoded: `{"success":true,"data":[...]}` of the
   * caller's rows newest first (at most USER_MEMORY_LIMIT), made of the JSON of each row, memoized per
   * cached row object and point of view (presentMemoryJson). Serializing the rows through the response
   * schema on every request was the route's main cost; then merging, concatenating and encoding the same
   * answer again on every request (see `answers`).
   */
  async listJson(auth: AuthContext): Promise<Buffer> {
    const got = this.visibleParts(auth);
    const parts = got instanceof Promise ? await got : got;
    const kept = this.answers.get(auth.memberships, auth.user, parts);
    if (kept) return kept;
    const rows = mergeNewestFirst(parts);
    let json = '{"success":true,"data":[';
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      if (i > 0) json += ',';
      json += presentMemoryJson(row, { editable: canEdit(auth, row), isAuthor: isAuthor(auth, row) });
    }
    const body = Buffer.from(json + ']}');
    this.answers.set({ key: auth.memberships, user: auth.user, parts, body });
    return body;
  }

  async create(auth: AuthContext, input: CreateMemoryInput) {
    const shared = input.shared === true;
    const institutionId = shared ? sharedPlacement(auth, input.institution) : null;
    if (!shared && input.institution !== undefined) throw badField('institution', 'institution is only for shared rows (shared: true)');
    const now = this.ctx.clock.now();
    const row = await repo.insertMemory(this.db, {
      id: newId(),
      authorUserId: auth.userId,
      institutionId,
      keyName: trimmed('key_name', input.key_name)!,
      keyValue: input.key_value,
      keyDescription: input.key_description ?? '',
      keyNamespace: trimmed('key_namespace', input.key_namespace) ?? 'default',
      shared,
      createdAt: now,
      updatedAt: now,
    });
    await this.announce([row]);
    return this.loadPresented(auth, row.id);
  }

  private async loadPresented(auth: AuthContext, id: string) {
    const row = await repo.findWithInstitution(this.db, id);
    if (!row) throw notFound('Memory parameter');
    return this.present(auth, row);
  }

  async update(auth: AuthContext, id: string, input: UpdateMemoryInput) {
    const row = await repo.findWithInstitution(this.db, id);
    if (!row) throw notFound('Memory parameter');
    assertEdit(auth, row);
    const patch: Partial<repo.MemoryRow> = {};
    if (input.key_name !== undefined) patch.keyName = trimmed('key_name', input.key_name)!;
    if (input.key_value !== undefined) patch.keyValue = input.key_value;
    if (input.key_description !== undefined) patch.keyDescription = input.key_description;
    if (input.key_namespace !== undefined) patch.keyNamespace = trimmed('key_namespace', input.key_namespace)!;
    if (input.shared !== undefined && input.shared !== row.shared) {
      assertChangeSharing(auth, row);
      patch.shared = input.shared;
      patch.institutionId = input.shared ? sharedPlacement(auth, input.institution) : null;
    } else if (input.institution !== undefined && input.institution !== row.institutionId) {
      throw badField('institution', 'institution can only be given when a personal row becomes shared');
    }
    if (Object.keys(patch).length > 0) {
      const updated = await repo.updateMemory(this.db, row.id, patch, this.ctx.clock.now());
      if (!updated) throw notFound('Memory parameter');
      await this.announce([row, updated]);
    }
    return this.loadPresented(auth, row.id);
  }

  async remove(auth: AuthContext, id: string): Promise<void> {
    const row = await repo.findWithInstitution(this.db, id);
    if (!row) throw notFound('Memory parameter');
    assertEdit(auth, row);
    if (!(await repo.deleteMemory(this.db, row.id))) throw notFound('Memory parameter');
    await this.announce([row]);
  }

  // ───────────── administration ─────────────

  private async loadTargetUser(auth: AuthContext, userId: string, permission: typeof MEMORY_READ) {
    const user = await findUserById(this.db, userId);
    if (!user) throw notFound('User');
    assertAdministersUser(auth, permission, user, await repo.institutionsOfUser(this.db, user.id));
    return user;
  }

  /** A user's rows the caller may read, one group per institution (personal first). */
  async adminListUser(auth: AuthContext, userId: string) {
    const user = await this.loadTargetUser(auth, userId, MEMORY_READ);
    const rows = (await repo.listAuthoredBy(this.db, user.id)).filter((r) => adminMay(auth, MEMORY_READ, r, user.accountId));
    const groups = new Map<string, { institution: ReturnType<typeof presentMemoryInstitution>; items: ReturnType<typeof presentMemory>[] }>();
    for (const r of rows) {
      const key = r.shared && r.institutionId ? r.institutionId : '';
      let group = groups.get(key);
      if (!group) groups.set(key, (group = { institution: presentMemoryInstitution(r), items: [] }));
      group.items.push(presentMemory(r, { editable: canEdit(auth, r), isAuthor: isAuthor(auth, r) }));
    }
    return [...groups.values()];
  }

  async adminListInstitution(auth: AuthContext, instId: string, query: { page?: number; pageSize?: number }) {
    const institution = await findInstitution(this.db, instId);
    if (!institution) throw notFound('Institution');
    assertAdministersInstitution(auth, MEMORY_READ, institution);
    const { page, pageSize, limit, offset } = pageWindow(query);
    const { rows, total } = await repo.listSharedOfInstitution(this.db, institution.id, { limit, offset });
    return {
      // editable as on the user routes (PUT /api/user/memory/{id}), whatever these routes let one delete
      ...envelope(rows.map((r) => presentMemory(r, { editable: canEdit(auth, r), isAuthor: isAuthor(auth, r) })), total, page, pageSize),
      institution: presentMemoryInstitution({ shared: true, institutionId: institution.id, institutionName: institution.name, institutionAiname: institution.ainame, institutionPicture: institution.picture }),
    };
  }

  /**
   * Bulk hard delete in one transaction. The candidates (the requested ids of this user, or the rows
   * matching namespace/shared) are locked, each one is re-authorized, and only the allowed ones go.
   */
  async adminDeleteUser(auth: AuthContext, userId: string, input: BulkDeleteInput) {
    const user = await this.loadTargetUser(auth, userId, MEMORY_DELETE);
    return this.bulkDelete(auth, input, { authorUserId: user.id }, () => user.accountId);
  }

  async adminDeleteInstitution(auth: AuthContext, instId: string, input: BulkDeleteInput) {
    const institution = await findInstitution(this.db, instId);
    if (!institution) throw notFound('Institution');
    assertAdministersInstitution(auth, MEMORY_DELETE, institution);
    return this.bulkDelete(auth, input, { institutionId: institution.id }, (c) => c.authorAccountId);
  }

  private async bulkDelete(auth: AuthContext, input: BulkDeleteInput, target: repo.BulkSelection, authorAccount: (c: repo.BulkCandidate) => string) {
    const ids = input.ids ? [...new Set(input.ids)] : undefined;
    // spec: with ids, only those rows are deleted; filters given as well narrow them further (never widen)
    // the namespace as rows store it (trimmed)
    const selection: repo.BulkSelection = { ...target, ids, namespace: trimmed('namespace', input.namespace), shared: input.shared };
    const { deleted, candidates, removed } = await this.db.transaction(async (tx) => {
      const found = await repo.lockCandidates(tx, selection);
      const allowed = found.filter((c) => adminMay(auth, MEMORY_DELETE, c, authorAccount(c)));
      return { deleted: await repo.deleteMany(tx, allowed.map((c) => c.id)), candidates: found.length, removed: allowed };
    });
    await this.announce(removed);
    const skipped = (ids ? ids.length : candidates) - deleted;
    return { success: true, deletedCount: deleted, skippedCount: skipped, message: `${deleted} deleted, ${skipped} skipped` };
  }
}
