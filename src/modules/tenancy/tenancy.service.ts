import type { AppContext } from '../../context.js';
import type { InstitutionRow } from './tenancy.repository.js';
import { badField, conflict, forbidden, notFound, validationFailed } from '../../shared/errors.js';
import { newId, newPublicId } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import { endCredentials } from '../identity/credentials.js';
import { findMembership, findUserByEmail, findUserById, updateUser } from '../identity/identity.repository.js';
import { profileChanges } from '../identity/identity.service.js';
import { hashPassword } from '../identity/passwords.js';
import { canInAccount, canInInstitution, holdsPermission, type GlobalRole } from './permissions.js';
import {
  assertAccount,
  assertGrantable,
  assertInstitution,
  assertMembershipWrite,
  assertUserRead,
  assertUserWrite,
  canEditAccountLevelFields,
  listingScope,
  seesAccount,
  seesInstitution,
  visibleMembership,
} from './tenancy.policy.js';
import { presentAccount, presentAdminUser, presentInstitution, presentInstitutionsUsage } from './tenancy.presenters.js';
import * as repo from './tenancy.repository.js';
import type { AccountsListInput, CreateInstitutionInput, CreateUserInput, PatchInstitutionInput, PatchUserInput } from './tenancy.schemas.js';

/** Request field → column of the institutions table, for every settable institution field. */
const INSTITUTION_COLUMNS = {
  name: 'name',
  ainame: 'ainame',
  about: 'about',
  picture: 'picture',
  picture_bg: 'pictureBg',
  picture_dark_bg: 'pictureDarkBg',
  picture_animated: 'pictureAnimated',
  voice_agent_id: 'voiceAgentId',
  creditAward: 'creditAward',
  maxCompletionTokens: 'maxCompletionTokens',
  maxFiles: 'maxFiles',
  status: 'status',
  allowJoining: 'allowJoining',
  questionType: 'questionType',
  rtVoice: 'rtVoice',
  joiningAdminOnly: 'joiningAdminOnly',
  poolCredits: 'poolCredits',
  disableFileUploadForUser: 'disableFileUploadForUser',
  personalisationAsked: 'personalisationAsked',
  locationEnabled: 'locationEnabled',
  rtEnabled: 'rtEnabled',
  rtAdminOnly: 'rtAdminOnly',
  displayAgentDetails: 'displayAgentDetails',
  disableAssistantsForUser: 'disableAssistantsForUser',
  publicAuthorizedUrls: 'publicAuthorizedUrls',
  invoices_urls: 'invoicesUrls',
  toolsDisabled: 'toolsDisabled',
  ltiContextIds: 'ltiContextIds',
  assistantsDisabled: 'assistantsDisabled',
  contactEmail: 'contactEmail',
  summaryModel: 'summaryModel',
  conversationModel: 'conversationModel',
} as const satisfies Record<keyof PatchInstitutionInput, keyof InstitutionRow>;

/**
 * Fields only account-level admins (account admin of the owning account, superadmin) may change:
 * lifecycle, billing and cost limits. Institution admins edit the rest of their own institution.
 */
export const ACCOUNT_LEVEL_INSTITUTION_FIELDS = ['status', 'creditAward', 'poolCredits', 'maxFiles', 'maxCompletionTokens', 'summaryModel', 'conversationModel'] as const;

const MAX_CREDIT_CHANGE = 1e9;

function institutionColumns(input: PatchInstitutionInput): Partial<InstitutionRow> {
  const out: Record<string, unknown> = {};
  for (const [field, column] of Object.entries(INSTITUTION_COLUMNS)) {
    const value = (input as Record<string, unknown>)[field];
    if (value === undefined) continue;
    out[column] = typeof value === 'string' && (field === 'name' || field === 'ainame') ? value.trim() : value;
  }
  if (typeof out.name === 'string' && out.name === '') throw badField('name', 'name must not be blank');
  if (typeof out.ainame === 'string' && out.ainame === '') throw badField('ainame', 'ainame must not be blank');
  return out as Partial<InstitutionRow>;
}

/** Space-separated ids of a filter; empty → no filter. */
function idList(value: string | undefined): string[] | undefined {
  const ids = (value ?? '').split(/\s+/).filter(Boolean);
  return ids.length > 0 ? ids : undefined;
}

/**
 * Whether a credit value is a multiple of 0.0001. Balances are numeric(20,4): a value with more
 * decimals would be rounded silently, so it is refused instead. The tolerance only absorbs the
 * binary representation error of the decimal the client sent (about |v·1e4| × 2.2e-16), so e.g.
 * 0.0003 (0.0003 × 1e4 = 2.9999999999999996) passes while 0.00005 or 1000000000.00005 do not.
 */
export function isMultipleOfCreditUnit(value: number): boolean {
  const scaled = value * 1e4;
  if (!Number.isFinite(scaled)) return false;
  const units = Math.round(scaled);
  // A tiny non-zero value (1e-13) is no whole number of units, even if it rounds to 0 within tolerance.
  if (units === 0) return value === 0;
  return Math.abs(units - scaled) <= Math.abs(scaled) * 1e-15;
}

/** 400 on the field when a credit value (balance, award) has more than 4 decimals. */
function checkCreditValue(field: string, value: number | undefined): void {
  if (value !== undefined && !isMultipleOfCreditUnit(value)) throw badField(field, `${field} must be a multiple of 0.0001 (at most 4 decimals)`);
}

function checkAmount(amount: number): void {
  if (!Number.isFinite(amount) || amount === 0 || Math.abs(amount) > MAX_CREDIT_CHANGE) {
    throw badField('amount', 'amount must be a non-zero number between -1000000000 and 1000000000');
  }
  checkCreditValue('amount', amount);
}

function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | null;
  return e?.code === '23505' || e?.cause?.code === '23505';
}

export class TenancyService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  private now(): Date {
    return this.ctx.clock.now();
  }

  // ───────────── accounts ─────────────

  private async loadAccount(id: string) {
    const account = await repo.findAccount(this.db, id);
    if (!account) throw notFound('Account');
    return account;
  }

  async createAccount(auth: AuthContext, input: { name: string; managerEmail?: string; status?: string }) {
    if (!holdsPermission(auth, 'accounts.create')) throw forbidden('Missing permission accounts.create');
    const name = input.name.trim();
    if (!name) throw badField('name', 'name must not be blank');
    const now = this.now();
    const row = await repo.insertAccount(this.db, {
      id: newId(),
      name,
      managerEmail: input.managerEmail ?? null,
      status: input.status ?? 'active',
      createdAt: now,
      updatedAt: now,
    });
    return presentAccount(row);
  }

  async getAccount(auth: AuthContext, id: string) {
    const account = await this.loadAccount(id);
    assertAccount(auth, 'accounts.read', account.id);
    return presentAccount(account);
  }

  async updateAccount(auth: AuthContext, id: string, input: { name?: string; managerEmail?: string | null; status?: string }) {
    const account = await this.loadAccount(id);
    assertAccount(auth, 'accounts.edit', account.id);
    if (input.status !== undefined && input.status !== account.status && !canInAccount(auth, 'accounts.delete', account.id)) {
      throw forbidden('Only a superadmin may change the status of an account');
    }
    const patch: Partial<repo.AccountRow> = {};
    if (input.name !== undefined) {
      patch.name = input.name.trim();
      if (!patch.name) throw badField('name', 'name must not be blank');
    }
    if (input.managerEmail !== undefined) patch.managerEmail = input.managerEmail;
    if (input.status !== undefined) patch.status = input.status;
    const row = Object.keys(patch).length > 0 ? await repo.updateAccount(this.db, account.id, patch, this.now()) : account;
    if (patch.status !== undefined) this.ctx.auth.cache.invalidateAccount(account.id);
    if (!row) throw notFound('Account');
    return presentAccount(row);
  }

  async deleteAccount(auth: AuthContext, id: string): Promise<void> {
    const account = await this.loadAccount(id);
    assertAccount(auth, 'accounts.delete', account.id);
    if (account.id === auth.accountId) throw forbidden('You cannot delete the account you belong to');
    const deleted = await repo.deleteAccount(this.db, account.id);
    this.ctx.auth.cache.invalidateAccount(account.id);
    if (!deleted) throw notFound('Account');
  }

  async listAccounts(auth: AuthContext, input: AccountsListInput) {
    const scope = listingScope(auth, 'accounts.read');
    const minimum = input.minimum === true;
    const { page, pageSize, limit, offset } = pageWindow(minimum ? { ...input, page: 1 } : input);
    // The term is matched literally, spaces included; a blank term is no filter.
    const search = input.accountsearch?.trim() ? input.accountsearch : undefined;
    const { rows, total } = await repo.listAccounts(
      this.db,
      { accountIds: scope.all ? null : scope.accountIds, search, activeOnly: input.activeOnly === true },
      minimum ? null : { limit, offset },
    );
    const usage = input.insitutionsUsage ? await repo.institutionsUsage(this.db, rows.map((r) => r.id)) : null;
    const data = rows.map((a) => {
      const base = minimum ? { _id: a.id, name: a.name } : presentAccount(a);
      return usage ? { ...base, institutionsUsage: presentInstitutionsUsage(usage.get(a.id)) } : base;
    });
    if (minimum) return { ...envelope(data, total, 1, total), hasMore: false };
    return envelope(data, total, page, pageSize);
  }

  // ───────────── institutions ─────────────

  private async loadInstitution(id: string) {
    const institution = await repo.findInstitution(this.db, id);
    if (!institution) throw notFound('Institution');
    return institution;
  }

  async createInstitution(auth: AuthContext, input: CreateInstitutionInput) {
    checkCreditValue('credits', input.credits);
    checkCreditValue('creditAward', input.creditAward);
    const account = await repo.findAccount(this.db, input.account);
    if (!account) throw notFound('Account');
    assertAccount(auth, 'institutions.create', account.id);
    if (input.credits && !canInAccount(auth, 'institutions.credits', account.id)) throw forbidden('Missing permission institutions.credits on this account');
    const { account: _account, credits, ...fields } = input;
    const now = this.now();
    const row = await repo.insertInstitution(this.db, {
      ...institutionColumns(fields),
      id: newId(),
      accountId: account.id,
      publicId: newPublicId(),
      name: input.name.trim(),
      ainame: input.ainame.trim(),
      credits: credits ?? 0,
      createdAt: now,
      updatedAt: now,
    });
    return presentInstitution(row);
  }

  async getInstitution(auth: AuthContext, id: string) {
    const institution = await this.loadInstitution(id);
    assertInstitution(auth, 'institutions.read', institution);
    return presentInstitution(institution);
  }

  async updateInstitution(auth: AuthContext, id: string, input: PatchInstitutionInput) {
    checkCreditValue('creditAward', input.creditAward);
    const institution = await this.loadInstitution(id);
    assertInstitution(auth, 'institutions.edit', institution);
    const patch = institutionColumns(input);
    if (!canEditAccountLevelFields(auth, institution)) {
      const touched = ACCOUNT_LEVEL_INSTITUTION_FIELDS.filter((f) => {
        const column = INSTITUTION_COLUMNS[f];
        return column in patch && String(patch[column]) !== String(institution[column]);
      });
      if (touched.length > 0) throw forbidden(`Only account admins may change ${touched.join(', ')}`);
    }
    const row = Object.keys(patch).length > 0 ? await repo.updateInstitution(this.db, institution.id, patch, this.now()) : institution;
    if (patch.status !== undefined) this.ctx.auth.cache.invalidateInstitution(institution.id);
    if (!row) throw notFound('Institution');
    return presentInstitution(row);
  }

  async deleteInstitution(auth: AuthContext, id: string): Promise<void> {
    const institution = await this.loadInstitution(id);
    assertInstitution(auth, 'institutions.delete', institution);
    const deleted = await repo.deleteInstitution(this.db, institution.id);
    this.ctx.auth.cache.invalidateInstitution(institution.id); // its memberships are gone
    if (!deleted) throw notFound('Institution');
  }

  async listInstitutions(auth: AuthContext, query: { page?: number; pageSize?: number; account?: string; search?: string }) {
    const scope = listingScope(auth, 'institutions.read');
    const { page, pageSize, limit, offset } = pageWindow(query);
    const search = query.search?.trim() ? query.search : undefined;
    const { rows, total } = await repo.listInstitutions(
      this.db,
      { scope, accountIds: idList(query.account), search },
      { limit, offset },
    );
    return envelope(rows.map(presentInstitution), total, page, pageSize);
  }

  async addInstitutionCredits(auth: AuthContext, id: string, amount: number) {
    checkAmount(amount);
    const institution = await this.loadInstitution(id);
    assertInstitution(auth, 'institutions.credits', institution);
    const credits = await repo.addInstitutionCredits(this.db, institution.id, amount, this.now());
    if (credits === undefined) {
      const current = await repo.findInstitution(this.db, institution.id);
      if (!current) throw notFound('Institution');
      throw badField('amount', `The balance cannot go below zero (balance ${Number(current.credits)}, amount ${amount})`);
    }
    return { _id: institution.id, credits };
  }

  // ───────────── users ─────────────

  private async loadUser(id: string) {
    const user = await findUserById(this.db, id);
    if (!user) throw notFound('User');
    const memberships = await repo.membershipsOfUsers(this.db, [user.id]);
    return { user, memberships };
  }

  private present(auth: AuthContext, user: repo.UserRow, memberships: readonly repo.UserMembershipRow[]) {
    return presentAdminUser(
      user,
      memberships.filter((m) => m.userId === user.id && visibleMembership(auth, m)),
    );
  }

  async createUser(auth: AuthContext, input: CreateUserInput) {
    checkCreditValue('credits', input.credits);
    const account = await repo.findAccount(this.db, input.account);
    if (!account || !seesAccount(auth, account.id)) throw notFound('Account');
    const role: GlobalRole = input.role ?? 'user';
    assertGrantable(auth, role);

    const wanted = input.institutions.map((i) => i.institution);
    if (new Set(wanted).size !== wanted.length) throw badField('institutions', 'institutions lists the same institution twice');
    const found = new Map((await repo.findInstitutions(this.db, wanted)).map((i) => [i.id, i]));
    for (const id of wanted) {
      const inst = found.get(id);
      if (!inst || !seesInstitution(auth, inst)) throw notFound('Institution');
    }
    if (auth.role !== 'superadmin') {
      const foreign = wanted.filter((id) => found.get(id)!.accountId !== account.id);
      if (foreign.length > 0) {
        throw validationFailed('Every institution must belong to the account of the user', foreign.map((id) => ({ field: 'institutions', message: `institution ${id} belongs to another account` })));
      }
    }

    if (!canInAccount(auth, 'users.create', account.id)) {
      // Institution admins: only into institutions they administer, at least one, in their account.
      if (wanted.length === 0) throw forbidden('Institution admins must enrol the new user in an institution they administer');
      for (const id of wanted) {
        if (!canInInstitution(auth, 'users.create', found.get(id)!)) throw forbidden('You may only enrol new users in institutions you administer');
      }
    }
    if (input.credits && !canInAccount(auth, 'users.credits', account.id)) throw forbidden('Missing permission users.credits on this account');
    const profile = profileChanges(input);

    const email = input.email.trim();
    if (await findUserByEmail(this.db, email)) throw conflict('A user with this e-mail address already exists');
    const passwordHash = await hashPassword(input.password);
    const now = this.now();
    const id = newId();
    try {
      await this.db.transaction(async (tx) => {
        await repo.insertUser(tx, {
          id,
          accountId: account.id,
          email,
          passwordHash,
          ...profile,
          role,
          credits: input.credits ?? 0,
          currentInstitutionId: wanted[0] ?? null,
          createdAt: now,
          updatedAt: now,
        });
        for (const m of input.institutions) await repo.upsertMembership(tx, id, m.institution, m.role);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw conflict('A user with this e-mail address already exists');
      throw err;
    }
    const { user, memberships } = await this.loadUser(id);
    return this.present(auth, user, memberships);
  }

  async getUser(auth: AuthContext, id: string) {
    const { user, memberships } = await this.loadUser(id);
    assertUserRead(auth, user, memberships);
    return this.present(auth, user, memberships);
  }

  async updateUser(auth: AuthContext, id: string, input: PatchUserInput) {
    const { user, memberships } = await this.loadUser(id);
    assertUserWrite(auth, 'users.edit', user, memberships);
    const patch: Partial<repo.UserRow> = profileChanges(input);
    if (input.role !== undefined && input.role !== user.role) {
      assertGrantable(auth, input.role);
      patch.role = input.role;
    }
    if (input.status !== undefined) patch.status = input.status;
    if (input.password !== undefined) patch.passwordHash = await hashPassword(input.password);
    const endSessions = (input.status === 'disabled' && user.status !== 'disabled') || input.password !== undefined;
    const now = this.now();
    const updated = await this.db.transaction(async (tx) => {
      const row = Object.keys(patch).length > 0 ? await updateUser(tx, user.id, patch, now) : user;
      if (endSessions) await endCredentials(tx, user.id, input.password !== undefined ? 'password-reset-by-admin' : 'user-disabled', now);
      return row;
    });
    // after the commit: a read between the invalidation and the commit would cache the old row again
    this.ctx.auth.cache.invalidateUser(user.id);
    if (!updated) throw notFound('User');
    return this.present(auth, updated, memberships);
  }

  async deleteUser(auth: AuthContext, id: string): Promise<void> {
    const { user, memberships } = await this.loadUser(id);
    assertUserWrite(auth, 'users.delete', user, memberships);
    if (user.id === auth.userId) throw forbidden('You cannot delete yourself');
    const deleted = await repo.deleteUser(this.db, user.id);
    this.ctx.auth.cache.invalidateUser(user.id);
    if (!deleted) throw notFound('User');
  }

  async listUsers(auth: AuthContext, query: { page?: number; pageSize?: number; account?: string; institution?: string; search?: string }) {
    const scope = listingScope(auth, 'users.read');
    const { page, pageSize, limit, offset } = pageWindow(query);
    const search = query.search?.trim() ? query.search : undefined;
    const { rows, total } = await repo.listUsers(
      this.db,
      { scope, accountIds: idList(query.account), institutionId: query.institution, search },
      { limit, offset },
    );
    const memberships = await repo.membershipsOfUsers(this.db, rows.map((r) => r.id));
    return envelope(
      rows.map((u) => this.present(auth, u, memberships)),
      total,
      page,
      pageSize,
    );
  }

  async addUserCredits(auth: AuthContext, id: string, amount: number) {
    checkAmount(amount);
    const { user, memberships } = await this.loadUser(id);
    assertUserWrite(auth, 'users.credits', user, memberships);
    const credits = await repo.addUserCredits(this.db, user.id, amount, this.now());
    this.ctx.auth.cache.invalidateUser(user.id); // credits of GET /me
    if (credits === undefined) {
      const current = await findUserById(this.db, user.id);
      if (!current) throw notFound('User');
      throw badField('amount', `The balance cannot go below zero (balance ${Number(current.credits)}, amount ${amount})`);
    }
    return { _id: user.id, credits };
  }

  // ───────────── memberships ─────────────

  private async loadMembershipTarget(auth: AuthContext, userId: string, institutionId: string, role?: 'admin' | 'user') {
    const institution = await this.loadInstitution(institutionId);
    const user = await findUserById(this.db, userId);
    if (!user) {
      assertInstitution(auth, 'memberships.edit', institution);
      throw notFound('User');
    }
    const memberships = await repo.membershipsOfUsers(this.db, [user.id]);
    assertMembershipWrite(auth, institution, user, memberships, role);
    return { institution, user };
  }

  async enrol(auth: AuthContext, input: { user: string; institution: string; role: 'admin' | 'user' }) {
    const { institution, user } = await this.loadMembershipTarget(auth, input.user, input.institution, input.role);
    const before = await findMembership(this.db, user.id, institution.id);
    const { created } = await this.db.transaction((tx) => repo.upsertMembership(tx, user.id, institution.id, input.role));
    this.ctx.auth.cache.invalidateUser(user.id);
    const message = created ? 'Enrolled' : before?.role === input.role ? 'Unchanged' : 'Role changed';
    return { created, message, data: { user: user.id, institution: institution.id, role: input.role, created } };
  }

  async unenrol(auth: AuthContext, input: { user: string; institution: string }) {
    const { institution, user } = await this.loadMembershipTarget(auth, input.user, input.institution);
    const removed = await this.db.transaction(async (tx) => {
      const gone = await repo.deleteMembership(tx, user.id, institution.id);
      if (gone) await repo.clearCurrentInstitution(tx, user.id, institution.id);
      return gone;
    });
    this.ctx.auth.cache.invalidateUser(user.id);
    if (!removed) throw notFound('Membership');
  }
}
