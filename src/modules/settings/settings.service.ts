import type { AppContext } from '../../context.js';
import { isUniqueViolation } from '../../db/errors.js';
import { badField, conflict, duplicateKey, forbidden, notFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import { findInstitution } from '../tenancy/tenancy.repository.js';
import { assertChange, assertCreate, assertFlagChange, assertSharingChange, seesInstitutionSettings, visibleSettingsCondition } from './settings.policy.js';
import * as repo from './settings.repository.js';
import type { CreateSettingInput, UpdateSettingInput } from './settings.schemas.js';

export function presentSetting(s: repo.SettingRow) {
  return {
    _id: s.id,
    key: s.key,
    ...(s.value === null ? {} : { value: s.value }),
    institution: s.institutionId,
    user: s.userId ?? '',
    status: s.status,
    admin_only: s.adminOnly,
    institution_shared: s.institutionShared,
    editable_others: s.editableOthers,
    created: s.createdAt.toISOString(),
    updated: s.updatedAt.toISOString(),
    __v: s.version,
  };
}

const duplicate = (key: string) => duplicateKey(`A setting with the key "${key}" already exists in this institution`, [{ field: 'key', message: 'key must be unique within the institution' }]);

/** Control, format (zero-width, bidi) and line/paragraph separator characters: a key holding one looks like another key. */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

/**
 * A key as stored and compared: trimmed and in Unicode NFC, so that "café" typed composed or decomposed
 * is one key; invisible characters are refused (400) rather than making look-alike keys.
 */
function cleanKey(key: string): string {
  const k = key.trim().normalize('NFC');
  if (!k) throw badField('key', 'key must not be blank');
  if (INVISIBLE.test(k)) throw badField('key', 'key must not contain control or invisible formatting characters');
  return k;
}

export class SettingsService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  private async institutionFor(auth: AuthContext, institutionId: string | undefined) {
    const id = institutionId ?? auth.institutionId;
    if (!id) throw forbidden('No current institution: switch to one (or pass institution)');
    const institution = await findInstitution(this.db, id);
    if (!institution || !seesInstitutionSettings(auth, institution)) throw notFound('Institution');
    return institution;
  }

  async create(auth: AuthContext, input: CreateSettingInput) {
    const institutionId = auth.institutionId;
    if (!institutionId) throw forbidden('No current institution: settings are created in the institution of your session (switch to one)');
    const institution = await findInstitution(this.db, institutionId);
    if (!institution) throw notFound('Institution');
    const adminOnly = input.admin_only === true;
    assertCreate(auth, institution, adminOnly);
    const key = cleanKey(input.key);
    const now = this.ctx.clock.now();
    const row = await repo.insertSettingUnlessDuplicate(this.db, {
      id: newId(),
      institutionId: institution.id,
      userId: auth.userId,
      key,
      value: input.value ?? null,
      status: 'active',
      adminOnly,
      institutionShared: input.institution_shared ?? true,
      editableOthers: input.editable_others === true,
      version: 0,
      createdAt: now,
      updatedAt: now,
    });
    if (!row) throw duplicate(key);
    return presentSetting(row);
  }

  async list(auth: AuthContext, query: { page?: number; pageSize?: number; institution?: string; key?: string }) {
    const institution = await this.institutionFor(auth, query.institution);
    const { page, pageSize, limit, offset } = pageWindow(query);
    const { rows, total } = await repo.listSettings(this.db, { institutionId: institution.id, visible: visibleSettingsCondition(auth, institution), key: query.key === undefined ? undefined : cleanKey(query.key) }, { limit, offset });
    return envelope(rows.map(presentSetting), total, page, pageSize);
  }

  async update(auth: AuthContext, id: string, input: UpdateSettingInput) {
    const row = await repo.findSetting(this.db, id);
    if (!row) throw notFound('Setting');
    assertChange(auth, row);
    const patch: Partial<repo.SettingRow> = {};
    if (input.key !== undefined) patch.key = cleanKey(input.key);
    if (input.value !== undefined) patch.value = input.value;
    if (input.status !== undefined) patch.status = input.status;
    if (input.admin_only !== undefined && input.admin_only !== row.adminOnly) {
      assertFlagChange(auth, row);
      patch.adminOnly = input.admin_only;
    }
    assertSharingChange(auth, row, input);
    if (input.editable_others !== undefined) patch.editableOthers = input.editable_others;
    if (input.institution_shared !== undefined) patch.institutionShared = input.institution_shared;
    let updated: repo.SettingRow | undefined;
    try {
      updated = await repo.updateSetting(this.db, row.id, patch, this.ctx.clock.now(), input.__v);
    } catch (err) {
      if (isUniqueViolation(err)) throw duplicate(patch.key ?? row.key);
      throw err;
    }
    if (!updated) {
      if (input.__v !== undefined && (await repo.findSetting(this.db, row.id))) throw conflict(`The setting was changed meanwhile (__v is no longer ${input.__v}); read it again`);
      throw notFound('Setting');
    }
    return presentSetting(updated);
  }

  async remove(auth: AuthContext, id: string): Promise<void> {
    const row = await repo.findSetting(this.db, id);
    if (!row) throw notFound('Setting');
    assertChange(auth, row);
    if (!(await repo.deleteSetting(this.db, row.id))) throw notFound('Setting');
  }
}
