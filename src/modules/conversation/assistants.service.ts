import type { AppContext } from '../../context.js';
import { badField, notFound } from '../../shared/errors.js';
import { isUuid, newId } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import * as repo from './assistants.repository.js';
import type { AdminAssistantsInput, CreateAssistantInput, PatchAssistantInput } from './assistants.schemas.js';
import {
  assertAdminFlags,
  assertCreateIn,
  assertDeleteAssistant,
  assertEditAssistant,
  assertSharingChange,
  assertSeeAssistant,
  assistantListingScope,
  administersInstitution,
} from './conversation.policy.js';
import { searchTerm } from '../../db/search.js';

export function presentAssistant(a: repo.AssistantView) {
  return {
    _id: a.id,
    name: a.name,
    description: a.description,
    instructions: a.instructions,
    picture_url: a.pictureUrl,
    liked_count: a.likedCount,
    remember_history: a.rememberHistory,
    history_count: a.historyCount,
    admin_only: a.adminOnly,
    institution_shared: a.institutionShared,
    editable_others: a.editableOthers,
    created: a.createdAt.toISOString(),
    argument_1: a.argument1,
    argument_2: a.argument2,
    argument_3: a.argument3,
    argument_4: a.argument4,
    argument_5: a.argument5,
    ragCollections: a.ragCollections,
    assistantToolMode: a.assistantToolMode,
    assistantTools: a.assistantTools.map((t) => ({ tool: t.tool, instructionsOverride: t.instructionsOverride ?? '' })),
    institution: a.institutionId,
    owner: a.ownerUserId,
    liked: a.liked,
    user_data: {
      email: a.ownerEmail ?? '',
      fname: a.ownerFname ?? '',
      lname: a.ownerLname ?? '',
      institution: a.ownerInstitutionId ?? '',
      accountType: a.ownerRole ?? '',
    },
    institution_data: { name: a.institutionName ?? '', ainame: a.institutionAiname ?? '', status: a.institutionStatus ?? '', picture: a.institutionPicture ?? '' },
    account_data: { name: a.accountName, status: a.accountStatus },
  };
}

/** Spec field names → columns. */
function columnsOf(input: PatchAssistantInput) {
  const out: Partial<repo.AssistantRow> = {};
  if (input.name !== undefined) out.name = input.name.trim();
  if (input.description !== undefined) out.description = input.description;
  if (input.instructions !== undefined) out.instructions = input.instructions;
  if (input.picture_url !== undefined) out.pictureUrl = input.picture_url;
  if (input.remember_history !== undefined) out.rememberHistory = input.remember_history;
  if (input.history_count !== undefined) out.historyCount = input.history_count;
  if (input.admin_only !== undefined) out.adminOnly = input.admin_only;
  if (input.institution_shared !== undefined) out.institutionShared = input.institution_shared;
  if (input.editable_others !== undefined) out.editableOthers = input.editable_others;
  if (input.argument_1 !== undefined) out.argument1 = input.argument_1;
  if (input.argument_2 !== undefined) out.argument2 = input.argument_2;
  if (input.argument_3 !== undefined) out.argument3 = input.argument_3;
  if (input.argument_4 !== undefined) out.argument4 = input.argument_4;
  if (input.argument_5 !== undefined) out.argument5 = input.argument_5;
  if (input.ragCollections !== undefined) out.ragCollections = input.ragCollections;
  if (input.assistantToolMode !== undefined) out.assistantToolMode = input.assistantToolMode;
  if (input.assistantTools !== undefined) out.assistantTools = input.assistantTools.map((t) => ({ tool: t.tool, instructionsOverride: t.instructionsOverride ?? '' }));
  return out;
}

/** Assistants (contract §6): CRUD, likes, and the admin listing. Access: conversation.policy.ts. */
export class AssistantsService {
  constructor(private readonly ctx: AppContext) {}

  private async view(auth: AuthContext, id: string) {
    const found = await repo.findAssistantView(this.ctx.db, id, auth.userId);
    assertSeeAssistant(auth, found);
    return found as repo.AssistantView;
  }

  private async checkCollections(auth: AuthContext, ids: readonly string[] | undefined) {
    if (!ids?.length) return;
    const visible = await repo.visibleCollectionIds(this.ctx.db, auth, ids);
    const missing = ids.filter((id) => !visible.has(id));
    if (missing.length) throw badField('ragCollections', `Unknown or invisible collection(s): ${missing.join(', ')}`);
  }

  async create(auth: AuthContext, input: CreateAssistantInput) {
    if (input.name.trim() === '') throw badField('name', 'name must not be blank');
    const institutionId = input.institution === undefined ? auth.institutionId : input.institution;
    const institution = institutionId ? await repo.findInstitutionSwitches(this.ctx.db, institutionId) : undefined;
    if (institutionId) {
      if (!institution) throw notFound('Institution');
      assertCreateIn(auth, institution);
    }
    assertAdminFlags(auth, institution ?? null, { adminOnly: input.admin_only, system: input.system });
    if (!institution && (input.institution_shared || input.editable_others)) {
      throw badField('institution_shared', 'A personal assistant (no institution) cannot be shared');
    }
    await this.checkCollections(auth, input.ragCollections);
    const now = this.ctx.clock.now();
    const id = newId();
    await repo.insertAssistant(this.ctx.db, {
      id,
      accountId: institution?.accountId ?? auth.accountId,
      institutionId: institution?.id ?? null,
      ownerUserId: input.system ? null : auth.userId,
      name: input.name.trim(),
      ...columnsOf({ ...input, name: undefined }),
      createdAt: now,
      updatedAt: now,
    });
    return presentAssistant(await this.view(auth, id));
  }

  async list(auth: AuthContext, institution?: string) {
    const institutionId = institution ?? auth.institutionId;
    if (institution && !auth.memberships.has(institution) && auth.role !== 'superadmin') {
      const inst = await repo.findInstitutionSwitches(this.ctx.db, institution);
      if (!inst || !administersInstitution(auth, inst)) throw notFound('Institution');
    }
    const rows = await repo.listVisibleAssistants(this.ctx.db, auth, institutionId ?? null);
    return rows.map(presentAssistant);
  }

  async get(auth: AuthContext, id: string) {
    return presentAssistant(await this.view(auth, id));
  }

  async update(auth: AuthContext, id: string, input: PatchAssistantInput) {
    const current = await this.view(auth, id);
    assertEditAssistant(auth, current);
    const institution = current.institutionId ? { id: current.institutionId, accountId: current.accountId } : null;
    if (input.admin_only !== undefined && input.admin_only !== current.adminOnly) assertAdminFlags(auth, institution, { adminOnly: true });
    assertSharingChange(auth, current, input);
    if (!institution && (input.institution_shared || input.editable_others)) throw badField('institution_shared', 'A personal assistant (no institution) cannot be shared');
    if (input.name !== undefined && input.name.trim() === '') throw badField('name', 'name must not be blank');
    await this.checkCollections(auth, input.ragCollections);
    const patch = columnsOf(input);
    if (Object.keys(patch).length) await repo.updateAssistant(this.ctx.db, id, { ...patch, updatedAt: this.ctx.clock.now() });
    return presentAssistant(await this.view(auth, id));
  }

  async remove(auth: AuthContext, id: string) {
    const current = await this.view(auth, id);
    assertDeleteAssistant(auth, current);
    if (!(await repo.deleteAssistant(this.ctx.db, id))) throw notFound('Assistant');
  }

  async like(auth: AuthContext, id: string, like: boolean) {
    await this.view(auth, id);
    const count = await repo.setLike(this.ctx.db, id, auth.userId, like, this.ctx.clock.now());
    return { success: true, liked: like, liked_count: count };
  }

  async adminList(auth: AuthContext, input: AdminAssistantsInput) {
    const scope = assistantListingScope(auth);
    const { page, pageSize, limit, offset } = pageWindow({ page: input.page, pageSize: input.pageSize ?? input.limitsearch });
    const accountIds = input.account?.split(/\s+/u).filter(Boolean);
    if (accountIds?.some((id) => !isUuid(id))) throw badField('account', 'account must be space-separated account ids');
    const { rows, total } = await repo.listAssistantsForAdmin(
      this.ctx.db,
      {
        scope,
        institutionId: input.institution,
        accountIds: accountIds?.length ? accountIds : undefined,
        usersearch: searchTerm(input.usersearch),
        adminOnly: input.admin_only === true,
        systemOnly: input.system_only === true,
      },
      { limit, offset },
      auth.userId,
    );
    const data = input.minimum ? rows.map((a) => ({ _id: a.id, name: a.name, institution: a.institutionId })) : rows.map(presentAssistant);
    return envelope<unknown>(data, total, page, pageSize);
  }
}

