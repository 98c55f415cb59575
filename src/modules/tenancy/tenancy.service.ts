import type { AppContext } from '../../context.js';
import { isUniqueViolation } from '../../db/errors.js';
import type { InstitutionRow } from './tenancy.repository.js';
import { AppError, badField, conflict, notFound, rateLimited } from '../../shared/errors.js';
import { newId, newPublicId } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { KeyedRequest } from '../../platform/idempotency.js';
import { ALL_RECORDS } from '../../platform/invalidation.js';
import type { AuthContext } from '../identity/auth-context.js';
import { endCredentials } from '../identity/credentials.js';
import { findUserByEmail, findUserById, updateUser } from '../identity/identity.repository.js';
import { profileChanges } from '../identity/identity.service.js';
import { hashPassword } from '../identity/passwords.js';
import type { GlobalRole } from './permissions.js';
import {
  assertAccount,
  assertAccountCreate,
  assertAccountDelete,
  assertAccountUpdate,
  assertGrantable,
  assertInstitution,
  assertInstitutionCreate,
  assertInstitutionPatch,
  assertMembershipWrite,
  assertMint,
  assertTransfer,
  assertTransferSide,
  assertUserCreate,
  assertUserDelete,
  assertSuperadminRemains,
  assertUserRead,
  assertUserUpdate,
  assertUserWrite,
  limitsEmailProbes,
  listingScope,
  mayRemoveSuperadmin,
  visibleAccountFilter,
  visibleCurrentInstitution,
  visibleHomeAccount,
  visibleInstitutionFilter,
  visibleMembership,
  type TransferSide,
} from './tenancy.policy.js';
import { HolderGoneError, moveInstitutionCredits, moveUserCredits, transferCredits, type Holder } from './credits.repository.js';
import { checkUrlList, checkUrlValue } from './urls.js';
import { WindowCounter } from '../../shared/window-counter.js';
import { presentAccount, presentAdminUser, presentInstitution, presentInstitutionsUsage } from './tenancy.presenters.js';
import * as repo from './tenancy.repository.js';
import type { AccountsListInput, CreateInstitutionInput, CreateUserInput, PatchInstitutionInput, PatchUserInput } from './tenancy.schemas.js';
import { searchTerm } from '../../db/search.js';
import { visibleText } from '../vault/text.js';

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

/** Branding picture fields: an URL, or '' (no picture). */
const PICTURE_FIELDS = ['picture', 'picture_bg', 'picture_dark_bg', 'picture_animated'] as const;
/** URL list fields. */
const URL_LIST_FIELDS = ['publicAuthorizedUrls', 'invoices_urls'] as const;

/** 400 on the field when a URL field holds anything but https: (http: outside production) URLs; see urls.ts. */
function checkUrlFields(input: PatchInstitutionInput, allowHttp: boolean): void {
  for (const field of PICTURE_FIELDS) {
    const value = input[field];
    if (value === undefined || value === '') continue;
    const problem = checkUrlValue(value, allowHttp);
    if (problem) throw badField(field, `${field} ${problem}`);
  }
  for (const field of URL_LIST_FIELDS) {
    const value = input[field];
    if (value === undefined) continue;
    const problem = checkUrlList(value, allowHttp);
    if (problem) throw badField(field, `${field} ${problem}`);
  }
  if (input.ltiContextIds?.some((id) => id.trim() === '' || id.trim() !== id)) throw badField('ltiContextIds', 'ltiContextIds must not hold blank ids or ids with surrounding spaces');
}

/**
 * A name that would show as nothing: empty once invisible format characters (Unicode Cf: zero-width
 * spaces, bidi marks, the BOM) are set aside and white space trimmed, as for the vault's collection names
 * (vault/text.ts visibleText). Only the check: a name is stored as given, trimmed (a zero-width joiner
 * inside a real name is part of it).
 */
const isBlankName = (value: string): boolean => visibleText(value) === '';

function institutionColumns(input: PatchInstitutionInput): Partial<InstitutionRow> {
  const out: Record<string, unknown> = {};
  for (const [field, column] of Object.entries(INSTITUTION_COLUMNS)) {
    const value = (input as Record<string, unknown>)[field];
    if (value === undefined) continue;
    out[column] = typeof value === 'string' && (field === 'name' || field === 'ainame') ? value.trim() : value;
  }
  if (typeof out.name === 'string' && isBlankName(out.name)) throw badField('name', 'name must not be blank');
  if (typeof out.ainame === 'string' && isBlankName(out.ainame)) throw badField('ainame', 'ainame must not be blank');
  return out as Partial<InstitutionRow>;
}

/** Space-separated ids of a filter; empty → no filter. */
function idList(value: string | undefined): string[] | undefined {
  const ids = (value ?? '').split(/\s+/).filter(Boolean);
  return ids.length > 0 ? ids : undefined;
}

/**
 * Whether a credit value is a multiple of 0.0001. Balances are numeric(20,4): a value with more
 * decimals would be rounded silently, so it is refused instead. A value is one when it is the double
 * nearest to its own rounding to 4 decimals: the number the client wrote had at most 4 decimals
 * (0.0003, whose double is 0.000299999…, passes; 0.00005, 1000000000.00005 and 123456789.00000004 do not).
 */
export function isMultipleOfCreditUnit(value: number): boolean {
  if (!Number.isFinite(value)) return false;
  return Number(value.toFixed(4)) === value;
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

/** A duplicate LTI context id: it belongs to another institution (409; the holder is not named). */
function isLtiConflict(err: unknown): boolean {
  const e = err as { constraint?: unknown; cause?: { constraint?: unknown; detail?: unknown } } | null;
  const text = `${String(e?.constraint ?? '')} ${String(e?.cause?.constraint ?? '')} ${String(e?.cause?.detail ?? '')}`;
  return isUniqueViolation(err) && /institution_lti_contexts|context_id/.test(text);
}

const LTI_TAKEN = 'An LTI context id in ltiContextIds already belongs to another institution; each context id maps to one institution';

const HOUR_MS = 3_600_000;

const EMAIL_UNAVAILABLE = 'This e-mail address cannot be used for a new user';

export interface TransferInput {
  from: { institution?: string; user?: string };
  to: { institution?: string; user?: string };
  amount: number;
}

/** A balance after a top-up or correction. */
export interface CreditsResult {
  _id: string;
  credits: number;
}

/** A transfer: its ledger refId and both balances after it. */
export interface TransferResult {
  refId: string;
  amount: number;
  from: Holder & { credits: number };
  to: Holder & { credits: number };
}

/** Exactly one of institution / user names a balance. */
function holderOf(side: { institution?: string; user?: string }, field: string): Holder {
  if (side.institution !== undefined && side.user === undefined) return { institution: side.institution };
  if (side.user !== undefined && side.institution === undefined) return { user: side.user };
  throw badField(field, `${field} must name exactly one balance: {institution} or {user}`);
}

const sameHolder = (a: Holder, b: Holder) => ('institution' in a && 'institution' in b && a.institution === b.institution) || ('user' in a && 'user' in b && a.user === b.user);

const sideAccount = (side: TransferSide) => (side.kind === 'institution' ? side.institution.accountId : side.user.accountId);

/** Whether a patched value equals the stored one: null only equals null (String(null) is "null", a valid text value). */
const sameValue = (a: unknown, b: unknown): boolean => (a === null || a === undefined || b === null || b === undefined ? (a ?? null) === (b ?? null) : String(a) === String(b));

/** Stored files deleted at once after a user, institution or account deletion. */
const STORAGE_DELETE_CONCURRENCY = 8;

export class TenancyService {
  /** Refused e-mails per admin (row 9 of issue 7); in-process, like the other limits without REDIS_URL. */
  private readonly emailConflicts = new WindowCounter(HOUR_MS);

  constructor(private readonly ctx: AppContext) {}

  private get allowHttpUrls(): boolean {
    return this.ctx.config.nodeEnv !== 'production';
  }

  private get db() {
    return this.ctx.db;
  }

  private now(): Date {
    return this.ctx.clock.now();
  }

  /**
   * After a deletion has committed: the bytes of the uploads whose rows went with it (ON DELETE CASCADE), as
   * DELETE /api/user/files/{id} removes them. Best effort: a failure is logged, the deletion stands.
   */
  private async removeStoredFiles(keys: readonly string[], deleted: { kind: string; id: string }): Promise<void> {
    for (let i = 0; i < keys.length; i += STORAGE_DELETE_CONCURRENCY) {
      await Promise.all(
        keys.slice(i, i + STORAGE_DELETE_CONCURRENCY).map((key) =>
          this.ctx.providers.storage.delete(key).catch((err: unknown) => this.ctx.log.warn({ err, key, [deleted.kind]: deleted.id }, 'could not remove the stored file of a deleted upload')),
        ),
      );
    }
  }

  // ───────────── accounts ─────────────

  private async loadAccount(id: string) {
    const account = await repo.findAccount(this.db, id);
    if (!account) throw notFound('Account');
    return account;
  }

  async createAccount(auth: AuthContext, input: { name: string; managerEmail?: string; status?: string }) {
    assertAccountCreate(auth);
    const name = input.name.trim();
    if (isBlankName(name)) throw badField('name', 'name must not be blank');
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
    assertAccountUpdate(auth, account, input);
    const patch: Partial<repo.AccountRow> = {};
    if (input.name !== undefined) {
      patch.name = input.name.trim();
      if (isBlankName(patch.name)) throw badField('name', 'name must not be blank');
    }
    if (input.managerEmail !== undefined) patch.managerEmail = input.managerEmail;
    if (input.status !== undefined) patch.status = input.status;
    const row = Object.keys(patch).length > 0 ? await repo.updateAccount(this.db, account.id, patch, this.now()) : account;
    if (patch.status !== undefined) {
      this.ctx.auth.cache.invalidateAccount(account.id);
      // the branding status of its twins follows the account's (rare: every node drops its institution caches)
      if (patch.status !== account.status) await this.ctx.invalidation.publish('institution', { id: ALL_RECORDS });
    }
    if (!row) throw notFound('Account');
    return presentAccount(row);
  }

  async deleteAccount(auth: AuthContext, id: string): Promise<void> {
    const account = await this.loadAccount(id);
    assertAccountDelete(auth, account);
    const { deleted, storageKeys } = await this.db.transaction(async (tx) => {
      assertSuperadminRemains(await repo.lockActiveSuperadmins(tx), { accountId: account.id });
      return repo.deleteAccount(tx, account.id);
    });
    this.ctx.auth.cache.invalidateAccount(account.id);
    if (!deleted) throw notFound('Account');
    // Its institutions went with it (cascade): caches drop every institution.
    await this.ctx.invalidation.publish('institution', { id: ALL_RECORDS });
    await this.removeStoredFiles(storageKeys, { kind: 'accountId', id: account.id });
  }

  async listAccounts(auth: AuthContext, input: AccountsListInput) {
    const scope = listingScope(auth, 'accounts.read');
    const minimum = input.minimum === true;
    const { page, pageSize, limit, offset } = pageWindow(minimum ? { ...input, page: 1 } : input);
    // The term is matched literally, spaces included; a blank term is no filter.
    const search = searchTerm(input.accountsearch);
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
    assertInstitutionCreate(auth, account.id, input.credits);
    const { account: _account, credits, ...fields } = input;
    checkUrlFields(fields, this.allowHttpUrls);
    const now = this.now();
    const id = newId();
    try {
      const row = await this.db.transaction(async (tx) => {
        const inserted = await repo.insertInstitution(tx, {
          ...institutionColumns(fields),
          id,
          accountId: account.id,
          publicId: newPublicId(),
          name: input.name.trim(),
          ainame: input.ainame.trim(),
          credits: 0,
          createdAt: now,
          updatedAt: now,
        });
        if (!credits) return inserted;
        // An opening balance is a top-up by a superadmin, recorded like any other.
        const balance = await moveInstitutionCredits(tx, id, credits, { kind: 'topup', actorUserId: auth.userId, note: 'opening balance' });
        return { ...inserted, credits: balance ?? 0 };
      });
      return presentInstitution(row);
    } catch (err) {
      if (isLtiConflict(err)) throw new AppError(409, 'CONFLICT', LTI_TAKEN, [{ field: 'ltiContextIds', message: LTI_TAKEN }]);
      throw err;
    }
  }

  async getInstitution(auth: AuthContext, id: string) {
    const institution = await this.loadInstitution(id);
    assertInstitution(auth, 'institutions.read', institution);
    return presentInstitution(institution);
  }

  async updateInstitution(auth: AuthContext, id: string, input: PatchInstitutionInput) {
    checkCreditValue('creditAward', input.creditAward);
    const institution = await this.loadInstitution(id);
    const patch = institutionColumns(input);
    const changed = (Object.keys(INSTITUTION_COLUMNS) as Array<keyof typeof INSTITUTION_COLUMNS>).filter((f) => {
      const column = INSTITUTION_COLUMNS[f];
      return column in patch && !sameValue(patch[column], institution[column]);
    });
    assertInstitutionPatch(auth, institution, changed, ACCOUNT_LEVEL_INSTITUTION_FIELDS);
    checkUrlFields(input, this.allowHttpUrls);
    let row: InstitutionRow | undefined;
    try {
      row = Object.keys(patch).length > 0 ? await repo.updateInstitution(this.db, institution.id, patch, this.now()) : institution;
    } catch (err) {
      if (isLtiConflict(err)) throw new AppError(409, 'CONFLICT', LTI_TAKEN, [{ field: 'ltiContextIds', message: LTI_TAKEN }]);
      throw err;
    }
    if (patch.status !== undefined) this.ctx.auth.cache.invalidateInstitution(institution.id);
    if (!row) throw notFound('Institution');
    if (row !== institution) await this.ctx.invalidation.publish('institution', { id: institution.id });
    return presentInstitution(row);
  }

  async deleteInstitution(auth: AuthContext, id: string): Promise<void> {
    const institution = await this.loadInstitution(id);
    assertInstitution(auth, 'institutions.delete', institution);
    const { deleted, storageKeys } = await repo.deleteInstitution(this.db, institution.id, auth.userId);
    this.ctx.auth.cache.invalidateInstitution(institution.id); // its memberships are gone
    if (!deleted) throw notFound('Institution');
    await this.ctx.invalidation.publish('institution', { id: institution.id });
    await this.removeStoredFiles(storageKeys, { kind: 'institutionId', id: institution.id });
  }

  async listInstitutions(auth: AuthContext, query: { page?: number; pageSize?: number; account?: string; search?: string }) {
    const scope = listingScope(auth, 'institutions.read');
    const { page, pageSize, limit, offset } = pageWindow(query);
    const search = searchTerm(query.search);
    const { rows, total } = await repo.listInstitutions(
      this.db,
      { scope, accountIds: idList(query.account), search },
      { limit, offset },
    );
    return envelope(rows.map(presentInstitution), total, page, pageSize);
  }

  async addInstitutionCredits(auth: AuthContext, id: string, amount: number, keyed: KeyedRequest<CreditsResult> | null = null): Promise<CreditsResult> {
    checkAmount(amount);
    const institution = await this.loadInstitution(id);
    assertInstitution(auth, 'institutions.credits', institution);
    assertMint(auth);
    const credits = await this.db.transaction(async (tx) => {
      const balance = await moveInstitutionCredits(tx, institution.id, amount, { kind: amount > 0 ? 'topup' : 'correction', actorUserId: auth.userId });
      if (balance !== undefined) await keyed?.complete(tx, { _id: institution.id, credits: balance });
      return balance;
    });
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

  /**
   * Admin records of users: the home account, the enrolments and the current institution the caller may see
   * (tenancy.policy visibleHomeAccount, visibleMembership, visibleCurrentInstitution), so that another tenant's
   * account and institution ids never leak.
   */
  private async present(auth: AuthContext, users: readonly repo.UserRow[], memberships: readonly repo.UserMembershipRow[]) {
    // the account of each current institution: known from the enrolments, else read (a current institution is normally one of them)
    const accounts = new Map(memberships.map((m) => [m.institutionId, m.accountId]));
    const unknown = [...new Set(users.map((u) => u.currentInstitutionId).filter((id): id is string => id !== null && !accounts.has(id)))];
    for (const i of await repo.findInstitutions(this.db, unknown)) accounts.set(i.id, i.accountId);
    return users.map((user) => {
      const current = user.currentInstitutionId;
      const accountId = current === null ? undefined : accounts.get(current);
      return presentAdminUser(
        user,
        memberships.filter((m) => m.userId === user.id && visibleMembership(auth, m)),
        visibleHomeAccount(auth, user.accountId) ? user.accountId : null,
        current !== null && accountId !== undefined && visibleCurrentInstitution(auth, { id: current, accountId }) ? current : null,
      );
    });
  }

  private async presentOne(auth: AuthContext, user: repo.UserRow, memberships: readonly repo.UserMembershipRow[]) {
    const [presented] = await this.present(auth, [user], memberships);
    return presented!;
  }

  async createUser(auth: AuthContext, input: CreateUserInput) {
    checkCreditValue('credits', input.credits);
    const account = await repo.findAccount(this.db, input.account);
    if (!account) throw notFound('Account');
    const role: GlobalRole = input.role ?? 'user';
    const wanted = input.institutions.map((i) => i.institution);
    if (new Set(wanted).size !== wanted.length) throw badField('institutions', 'institutions lists the same institution twice');
    const found = new Map((await repo.findInstitutions(this.db, wanted)).map((i) => [i.id, i]));
    // an institution that does not exist is a 404 for everyone (a superadmin sees every one that does)
    if (wanted.some((id) => !found.has(id))) throw notFound('Institution');
    const listed = wanted.map((id) => found.get(id)!);
    assertUserCreate(auth, { account, role, institutions: listed, openingCredits: input.credits });
    const profile = profileChanges(input);

    // An e-mail is a global login name, so a taken one must be refused; the refusal is the same whatever
    // tenant holds it, and an admin who collects a few refusals may create no user for the rest of the
    // hour (row 9 of issue 7: "is this address taken?" cannot be harvested).
    const probeKey = `email-conflicts:${auth.userId}`;
    const nowMs = this.now().getTime();
    if (limitsEmailProbes(auth)) {
      const probes = this.emailConflicts.peek(probeKey, nowMs);
      if (probes.count >= this.ctx.config.adminEmailConflictsPerHour) {
        throw rateLimited(probes.retryAfterSeconds, `Too many refused e-mail addresses: you may create users again in ${probes.retryAfterSeconds} s`);
      }
    }
    const refuseEmail = () => {
      if (limitsEmailProbes(auth)) this.emailConflicts.hit(probeKey, nowMs);
      return conflict(EMAIL_UNAVAILABLE);
    };
    const email = input.email.trim();
    if (await findUserByEmail(this.db, email)) throw refuseEmail();
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
          credits: 0,
          currentInstitutionId: wanted[0] ?? null,
          createdAt: now,
          updatedAt: now,
        });
        // An opening balance is a top-up by a superadmin (assertUserCreate), recorded like any other.
        if (input.credits) await moveUserCredits(tx, id, input.credits, { kind: 'topup', actorUserId: auth.userId, note: 'opening balance' });
        for (const m of input.institutions) await repo.upsertMembership(tx, id, m.institution, m.role);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw refuseEmail();
      throw err;
    }
    const { user, memberships } = await this.loadUser(id);
    return this.presentOne(auth, user, memberships);
  }

  async getUser(auth: AuthContext, id: string) {
    const { user, memberships } = await this.loadUser(id);
    assertUserRead(auth, user, memberships);
    return this.presentOne(auth, user, memberships);
  }

  async updateUser(auth: AuthContext, id: string, input: PatchUserInput) {
    const { user, memberships } = await this.loadUser(id);
    assertUserUpdate(auth, user, memberships, input);
    const patch: Partial<repo.UserRow> = profileChanges(input);
    if (input.role !== undefined && input.role !== user.role) {
      assertGrantable(auth, input.role, user.accountId);
      patch.role = input.role;
    }
    if (input.status !== undefined) patch.status = input.status;
    if (input.password !== undefined) patch.passwordHash = await hashPassword(input.password);
    const endSessions = (input.status === 'disabled' && user.status !== 'disabled') || input.password !== undefined;
    const now = this.now();
    const updated = await this.db.transaction(async (tx) => {
      if (mayRemoveSuperadmin(patch)) assertSuperadminRemains(await repo.lockActiveSuperadmins(tx), { userId: user.id });
      const row = Object.keys(patch).length > 0 ? await updateUser(tx, user.id, patch, now) : user;
      if (endSessions) await endCredentials(tx, user.id, input.password !== undefined ? 'password-reset-by-admin' : 'user-disabled', now);
      return row;
    });
    // after the commit: a read between the invalidation and the commit would cache the old row again
    this.ctx.auth.cache.invalidateUser(user.id);
    if (!updated) throw notFound('User');
    return this.presentOne(auth, updated, memberships);
  }

  async deleteUser(auth: AuthContext, id: string): Promise<void> {
    const { user, memberships } = await this.loadUser(id);
    assertUserDelete(auth, user, memberships);
    const { deleted, storageKeys } = await this.db.transaction(async (tx) => {
      if (user.role === 'superadmin') assertSuperadminRemains(await repo.lockActiveSuperadmins(tx), { userId: user.id });
      return repo.deleteUser(tx, user.id, auth.userId);
    });
    this.ctx.auth.cache.invalidateUser(user.id);
    if (!deleted) throw notFound('User');
    await this.ctx.invalidation.publish('user', { id: user.id });
    await this.removeStoredFiles(storageKeys, { kind: 'userId', id: user.id });
  }

  async listUsers(auth: AuthContext, query: { page?: number; pageSize?: number; account?: string; institution?: string; search?: string }) {
    const scope = listingScope(auth, 'users.read');
    const { page, pageSize, limit, offset } = pageWindow(query);
    const search = searchTerm(query.search);
    const institution = query.institution === undefined ? undefined : await repo.findInstitution(this.db, query.institution);
    const { rows, total } = await repo.listUsers(
      this.db,
      { scope, accountIds: visibleAccountFilter(auth, idList(query.account)), institutionIds: visibleInstitutionFilter(auth, query.institution, institution), search },
      { limit, offset },
    );
    const memberships = await repo.membershipsOfUsers(this.db, rows.map((r) => r.id));
    return envelope(
      await this.present(auth, rows, memberships),
      total,
      page,
      pageSize,
    );
  }

  async addUserCredits(auth: AuthContext, id: string, amount: number, keyed: KeyedRequest<CreditsResult> | null = null): Promise<CreditsResult> {
    checkAmount(amount);
    const { user, memberships } = await this.loadUser(id);
    assertUserWrite(auth, 'users.credits', user, memberships);
    assertMint(auth);
    const credits = await this.db.transaction(async (tx) => {
      const balance = await moveUserCredits(tx, user.id, amount, { kind: amount > 0 ? 'topup' : 'correction', actorUserId: auth.userId });
      if (balance !== undefined) await keyed?.complete(tx, { _id: user.id, credits: balance });
      return balance;
    });
    this.ctx.auth.cache.invalidateUser(user.id); // credits of GET /me
    if (credits === undefined) {
      const current = await findUserById(this.db, user.id);
      if (!current) throw notFound('User');
      throw badField('amount', `The balance cannot go below zero (balance ${Number(current.credits)}, amount ${amount})`);
    }
    return { _id: user.id, credits };
  }

  /**
   * Moves credits between two balances of one account (institution or user), both of which the caller
   * holds power over (tenancy.policy assertTransferSide): the sum over the account never changes.
   */
  async transferCredits(auth: AuthContext, input: TransferInput, keyed: KeyedRequest<TransferResult> | null = null): Promise<TransferResult> {
    assertTransfer(auth);
    if (!isMultipleOfCreditUnit(input.amount)) throw badField('amount', 'amount must be a multiple of 0.0001 (at most 4 decimals)');
    const from = holderOf(input.from, 'from');
    const to = holderOf(input.to, 'to');
    if (sameHolder(from, to)) throw badField('to', 'from and to name the same balance');
    const sides = [await this.transferSide(from), await this.transferSide(to)] as const;
    for (const side of sides) assertTransferSide(auth, side);
    const [fromAccount, toAccount] = sides.map(sideAccount);
    if (fromAccount !== toAccount) throw badField('to', 'Credits move only between balances of one account');
    const result = (moved: { refId: string; from: number; to: number }): TransferResult => ({
      refId: moved.refId,
      amount: input.amount,
      from: { ...from, credits: moved.from },
      to: { ...to, credits: moved.to },
    });
    const moved = await transferCredits(this.db, from, to, input.amount, auth.userId, keyed ? (tx, m) => keyed.complete(tx, result(m)) : undefined).catch((err: unknown) => {
      // deleted by a concurrent request since it was checked above: as if it had been gone already
      if (err instanceof HolderGoneError) throw notFound('institution' in err.holder ? 'Institution' : 'User');
      throw err;
    });
    for (const holder of [from, to]) if ('user' in holder) this.ctx.auth.cache.invalidateUser(holder.user); // credits of GET /me
    if (!moved) throw badField('amount', `The source balance is smaller than ${input.amount}`);
    return result(moved);
  }

  private async transferSide(holder: Holder): Promise<TransferSide> {
    if ('institution' in holder) return { kind: 'institution', institution: await this.loadInstitution(holder.institution) };
    const { user, memberships } = await this.loadUser(holder.user);
    return { kind: 'user', user, memberships };
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
    const { created, before } = await this.db.transaction(async (tx) => {
      // The decision rests on the enrolment as it is (an outsider's enrolment may be lowered, not created):
      // taken again on the user's enrolments locked for this change, so one ended meanwhile is not re-created.
      const locked = await repo.membershipsOfUsers(tx, [user.id], { lock: true });
      assertMembershipWrite(auth, institution, user, locked, input.role);
      const before = locked.find((m) => m.institutionId === institution.id);
      return { ...(await repo.upsertMembership(tx, user.id, institution.id, input.role)), before };
    });
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
