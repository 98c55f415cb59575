import type { AppContext } from '../../context.js';
import { badField, notFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { AuthContext } from '../identity/auth-context.js';
import { presentCollection } from './collections.presenters.js';
import * as repo from './collections.repository.js';
import type { VaultLevel } from './collections.repository.js';
import type { FileStatusFilter } from './uploads.schemas.js';
import { fileNameTerm, visibleText } from './text.js';
import { assertModify, placementFor, samePlace, type VaultScope } from './vault.policy.js';

export interface CreateCollectionInput {
  name: string;
  institution?: string;
  account_shared?: boolean;
  parent?: string | null;
  color?: string | null;
  scope?: VaultScope;
}

export interface ListCollectionsInput {
  parent?: string;
  scope?: VaultScope;
  institution?: string;
}

export interface PatchCollectionInput {
  name?: string;
  color?: string | null;
  parent?: string | null;
}

export interface SelectAllIdsInput {
  parent?: string | null;
  institution?: string;
  scope?: VaultScope;
  fileNameSearch?: string;
  status?: FileStatusFilter;
}

/** The root level of a scope for the caller, placed through the policy (institution given, else current). */
function rootLevel(auth: AuthContext, scope: VaultScope, institution?: string): VaultLevel {
  if (scope === 'personal') return { scope: 'personal', userId: auth.userId };
  const placement = placementFor(auth, scope, institution);
  return scope === 'instance' ? { scope: 'instance', institutionId: placement.institutionId ?? '' } : { scope: 'account', accountId: placement.accountId };
}

/**
 * Collections: folders of the vault tree (contract §4). A collection lives in one scope and, for instance
 * scope, one institution (account scope: one account); its parent is always in the same place, so a
 * subtree never mixes audiences.
 */
export class CollectionsService {
  constructor(private readonly ctx: AppContext) {}

  /**
   * Scope of a new collection, in this order: the parent's (when a parent is given); `account` when
   * account_shared is true; the `scope` field; otherwise `instance` when an institution is given or
   * current, else `personal`. Contradicting fields are a 400.
   */
  async create(auth: AuthContext, input: CreateCollectionInput) {
    const name = visibleText(input.name);
    if (!name) throw badField('name', 'name must contain a visible character');
    if (input.account_shared === true && input.scope && input.scope !== 'account') throw badField('account_shared', 'account_shared true means scope account');
    if (input.account_shared === false && input.scope === 'account') throw badField('account_shared', 'scope account means account_shared true');
    const now = this.ctx.clock.now();
    const id = newId();

    await this.ctx.db.transaction(async (tx) => {
      let scope: VaultScope;
      let institutionId: string | null;
      let accountId: string;
      let parentId: string | null = null;

      if (input.parent) {
        // Share-locked so that a concurrent delete of the parent waits for this child (and then moves it),
        // or has already happened and the parent is not found.
        const parent = await repo.findVisibleCollection(tx, auth, input.parent, { lock: 'share' });
        if (!parent) throw notFound('Parent collection');
        const wanted = input.account_shared === true ? 'account' : input.scope;
        if (wanted && wanted !== parent.scope) throw badField('parent', `The parent collection is in scope ${parent.scope}, not ${wanted}`);
        if (input.account_shared === false && parent.scope === 'account') throw badField('account_shared', 'The parent collection is account-shared');
        scope = parent.scope;
        parentId = parent.id;
        accountId = parent.accountId;
        institutionId = parent.institutionId;
        if (input.institution && scope !== 'personal') {
          const placed = placementFor(auth, scope, input.institution);
          if (scope === 'instance' && placed.institutionId !== parent.institutionId) throw badField('institution', 'The parent collection belongs to another institution');
          if (scope === 'account' && placed.accountId !== parent.accountId) throw badField('institution', 'The parent collection belongs to another account');
          institutionId = placed.institutionId;
        }
      } else {
        scope = input.account_shared === true ? 'account' : (input.scope ?? (input.institution || auth.institutionId ? 'instance' : 'personal'));
        const placed = placementFor(auth, scope, input.institution);
        institutionId = placed.institutionId;
        accountId = placed.accountId;
      }

      await repo.insertCollection(tx, {
        id,
        name,
        color: input.color ?? null,
        scope,
        parentId,
        ownerUserId: auth.userId,
        institutionId,
        accountId,
        now,
      });
    });
    return this.get(auth, id);
  }

  async get(auth: AuthContext, id: string) {
    const row = await repo.getVisibleCollection(this.ctx.db, auth, id);
    if (!row) throw notFound('Collection');
    return presentCollection(row);
  }

  /**
   * Sub-collections of `parent`, or root collections. At the root without `scope`: your personal ones
   * plus, when an institution is given or current, that institution's and its account's.
   */
  async list(auth: AuthContext, input: ListCollectionsInput) {
    if (input.parent) {
      const parent = await repo.findVisibleCollection(this.ctx.db, auth, input.parent);
      if (!parent) throw notFound('Parent collection');
      if (input.scope && input.scope !== parent.scope) throw badField('scope', `The parent collection is in scope ${parent.scope}`);
      return (await repo.listVisibleChildren(this.ctx.db, auth, { parentId: parent.id })).map(presentCollection);
    }
    let levels: VaultLevel[];
    if (input.scope) levels = [rootLevel(auth, input.scope, input.institution)];
    else {
      levels = [rootLevel(auth, 'personal')];
      if (input.institution || auth.institutionId) levels.push(rootLevel(auth, 'instance', input.institution), rootLevel(auth, 'account', input.institution));
    }
    return (await repo.listVisibleChildren(this.ctx.db, auth, { levels })).map(presentCollection);
  }

  /** Rename, recolour, move. Moves stay in the collection's scope and place, and never close a cycle. */
  async update(auth: AuthContext, id: string, input: PatchCollectionInput) {
    const now = this.ctx.clock.now();
    const name = input.name === undefined ? undefined : visibleText(input.name);
    if (name === '') throw badField('name', 'name must contain a visible character');
    await this.ctx.db.transaction(async (tx) => {
      const current = await repo.findVisibleCollection(tx, auth, id);
      if (!current) throw notFound('Collection');
      assertModify(auth, current, 'Only the owner or a vault administrator may change this collection');
      if (input.parent !== undefined && input.parent !== current.parentId) {
        await repo.lockTreeOfAccount(tx, current.accountId);
        if (input.parent !== null) {
          const parent = await repo.findVisibleCollection(tx, auth, input.parent, { lock: 'share' });
          if (!parent) throw notFound('Parent collection');
          if (parent.scope !== current.scope) throw badField('parent', `A collection cannot move from scope ${current.scope} to ${parent.scope}`);
          if (!samePlace(current, parent)) throw badField('parent', 'The new parent belongs to another institution, account or owner');
          if (await repo.isSelfOrDescendant(tx, parent.id, current.id)) throw badField('parent', 'A collection cannot move into itself or one of its sub-collections');
        }
      }
      await repo.updateCollection(tx, id, { name, color: input.color, parentId: input.parent }, now);
    });
    return this.get(auth, id);
  }

  /**
   * Deletes the collection only (never files): in one transaction its files, whatever their status,
   * and its direct sub-collections (with their subtrees) move to its parent, or to the vault root.
   */
  async remove(auth: AuthContext, id: string) {
    const now = this.ctx.clock.now();
    return this.ctx.db.transaction(async (tx) => {
      const found = await repo.findVisibleCollection(tx, auth, id);
      if (!found) throw notFound('Collection');
      assertModify(auth, found, 'Only the owner or a vault administrator may delete this collection');
      // Tree lock first, row lock second: the same order as a move, so the two cannot deadlock.
      await repo.lockTreeOfAccount(tx, found.accountId);
      const current = await repo.findVisibleCollection(tx, auth, id, { lock: 'update' });
      if (!current) throw notFound('Collection');
      const moved = await repo.deleteCollectionMovingContent(tx, auth, id, current.parentId, now);
      return { _id: id, movedTo: current.parentId, ...moved };
    });
  }

  /**
   * Everything selectable at one place of the vault: the files directly there and, when no filter is
   * active, the sub-collections there. Without a status filter, deleted files are left out.
   */
  async selectAllIds(auth: AuthContext, input: SelectAllIdsInput) {
    const search = fileNameTerm(input.fileNameSearch);
    const filtered = search !== undefined || input.status !== undefined;

    let parentId: string | null = null;
    let level: VaultLevel | undefined;
    if (input.parent) {
      const parent = await repo.findVisibleCollection(this.ctx.db, auth, input.parent);
      if (!parent) throw notFound('Collection');
      if (input.scope && input.scope !== parent.scope) throw badField('scope', `The collection is in scope ${parent.scope}`);
      parentId = parent.id;
    } else {
      if (!input.scope) throw badField('scope', 'scope is required at the vault root');
      level = rootLevel(auth, input.scope, input.institution);
    }

    const files = await repo.selectFiles(this.ctx.db, auth, { parentId, level, fileNameSearch: search, status: input.status });
    const collections = filtered ? [] : await repo.listVisibleChildren(this.ctx.db, auth, parentId ? { parentId } : { levels: [level!] });
    return {
      success: true,
      files: files.map((f) => ({ _id: f.id, originalname: f.originalname })),
      collections: collections.map((c) => ({ _id: c.id, name: c.name, fileCount: c.fileCount })),
      fileIds: files.map((f) => f.id),
      collectionIds: collections.map((c) => c.id),
      totalFiles: files.length,
      filtered,
    };
  }
}
