import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import { authOf, requirePermission, SECURED } from '../../http/auth.js';
import { absentBodyIsEmpty, type App } from '../../http/types.js';
import { REPLAYED_HEADER, type KeyedRequest } from '../../platform/idempotency.js';
import { errorResponses, IDEMPOTENCY_NOTE, IdempotencyHeaders, IdParams, SuccessOnly } from '../../shared/schemas.js';
import {
  AccountResponse,
  AccountsListBody,
  AccountsListResponse,
  AdminUserResponse,
  CreateAccountBody,
  CreateInstitutionBody,
  CreateUserBody,
  CreditsBody,
  CreditsResponse,
  InstitutionResponse,
  InstitutionsListResponse,
  InstitutionsQuery,
  MembershipBody,
  MembershipDeleteBody,
  MembershipResponse,
  PatchAccountBody,
  PatchInstitutionBody,
  PatchUserBody,
  TransferBody,
  TransferResponse,
  UsersListResponse,
  UsersQuery,
} from './tenancy.schemas.js';
import { ACCOUNT_LEVEL_INSTITUTION_FIELDS, TenancyService } from './tenancy.service.js';

const tags = ['admin'];

const SCOPE_NOTE =
  'A plain user gets 403 on every admin route. Records of an account the caller does not belong to answer 404 (other tenants never learn ' +
  'what exists); records the caller can see but may not act on answer 403. Authentication and the role check run before body validation.';

/** Admin management of accounts, institutions, users, memberships and credits (contract §2). */
export async function tenancyRoutes(app: App, ctx: AppContext): Promise<TenancyService> {
  const service = new TenancyService(ctx);
  /** Runs a credit movement under the request's Idempotency-Key: a retried top-up or transfer moves credits once. */
  const keyedCredits = async <T>(request: FastifyRequest, reply: FastifyReply, target: unknown, run: (keyed: KeyedRequest<T> | null) => Promise<T>) => {
    const key = request.headers['idempotency-key'];
    // the movement and the key's response commit in one transaction: a claim taken over meanwhile (its lease lapsed) rolls it back (409)
    const { response, replayed } = await ctx.idempotency.run({ userId: authOf(request).userId, key: typeof key === 'string' ? key : undefined, request: target }, run);
    if (replayed) reply.header(REPLAYED_HEADER, 'true');
    return { success: true, data: response };
  };
  // Authenticate and require admin.access before the body is validated: 401/403 never depend on the body.
  const admin = { preValidation: requirePermission(ctx, 'admin.access') };

  // ───────────── accounts ─────────────

  app.post(
    '/api/admin/account',
    {
      schema: {
        tags,
        summary: 'Create an account',
        description: `Superadmin only (accounts.create); others 403. status defaults to active. ${SCOPE_NOTE}`,
        security: SECURED,
        body: CreateAccountBody,
        response: { 201: AccountResponse, ...errorResponses(400, 401, 403) },
      },
      ...admin,
    },
    async (request, reply) => reply.status(201).send({ success: true, data: await service.createAccount(authOf(request), request.body) }),
  );

  app.get(
    '/api/admin/account/:id',
    {
      schema: {
        tags,
        summary: 'Read an account',
        description: `Superadmin, or the account admin of that account. ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        response: { 200: AccountResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => ({ success: true, data: await service.getAccount(authOf(request), request.params.id) }),
  );

  app.patch(
    '/api/admin/account/:id',
    {
      schema: {
        tags,
        summary: 'Update an account',
        description: `Superadmin, or the account admin of that account. Changing status (active/inactive) is reserved to superadmins. ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        body: PatchAccountBody,
        response: { 200: AccountResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => ({ success: true, data: await service.updateAccount(authOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/admin/account/:id',
    {
      schema: {
        tags,
        summary: 'Delete an account with its institutions, users and their data',
        description:
          'Superadmin only (accounts.delete). A superadmin cannot delete the account it belongs to (403), nor one whose deletion would leave ' +
          'the platform without an active superadmin (403). The vault files that go with the account (its own, and those its users ' +
          `uploaded anywhere) go from the file storage too, once the deletion is committed (best effort: a failure is logged). ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => {
      await service.deleteAccount(authOf(request), request.params.id);
      return { success: true, message: 'Account deleted' };
    },
  );

  app.post(
    '/api/admin/accounts',
    {
      schema: {
        tags,
        summary: 'Search accounts',
        description:
          'Superadmin: every account; account admin: only its own account; anyone else 403. Sorted by name. accountsearch matches name and ' +
          'managerEmail case-insensitively as a literal substring (% and _ are not wildcards). activeOnly: accounts whose users have started ' +
          'a session (lastActivityAt set). minimum: items are {_id, name} (plus institutionsUsage when insitutionsUsage is also true) and ' +
          'pagination is bypassed: page 1, pageSize = total, hasMore false. insitutionsUsage (spelled so) adds per account ' +
          '{count, credits, creditsUsed, creditsTotal = credits + creditsUsed, creditsUsagePct = creditsUsed / creditsTotal × 100 (2 decimals, 0 when total is 0)} over its institutions.',
        security: SECURED,
        body: AccountsListBody,
        response: { 200: AccountsListResponse, ...errorResponses(400, 401, 403) },
      },
      // Every field is optional: a request without a body lists with the defaults.
      preValidation: [...admin.preValidation, absentBodyIsEmpty],
    },
    async (request) => service.listAccounts(authOf(request), request.body),
  );

  // ───────────── institutions ─────────────

  app.post(
    '/api/admin/institution',
    {
      schema: {
        tags,
        summary: 'Create an institution',
        description:
          `Needs institutions.create in the account (superadmin, or account admin of that account); an opening credits balance creates ` +
          `credits, so only a superadmin may give one (403 otherwise; it is a topup row of the credit ledger). Branding picture fields and ` +
          `publicAuthorizedUrls / invoices_urls hold https: URLs (http: too outside production); javascript:, data:, wildcards (*) and ` +
          `non-URLs are a 400. An LTI context id belongs to one institution across all tenants: one already held elsewhere is a 409 CONFLICT ` +
          `(the holder is not named). Every field of the spec's Institution and Branding tables may be set; publicId (UUID v4) is generated. ` +
          `An account the caller cannot see is 404. ${SCOPE_NOTE}`,
        security: SECURED,
        body: CreateInstitutionBody,
        response: { 201: InstitutionResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request, reply) => reply.status(201).send({ success: true, data: await service.createInstitution(authOf(request), request.body) }),
  );

  app.get(
    '/api/admin/institutions',
    {
      schema: {
        tags,
        summary: 'List institutions',
        description:
          'Superadmin: all; account admin: its account; institution admin: the institutions it administers. Filters: account ' +
          '(space-separated ids), search (literal case-insensitive substring of name or ainame). Sorted by name.',
        security: SECURED,
        querystring: InstitutionsQuery,
        response: { 200: InstitutionsListResponse, ...errorResponses(400, 401, 403) },
      },
      ...admin,
    },
    async (request) => service.listInstitutions(authOf(request), request.query),
  );

  app.get(
    '/api/admin/institution/:id',
    {
      schema: {
        tags,
        summary: 'Read an institution',
        description: `Needs institutions.read on it (superadmin, account admin of its account, or an admin of the institution). cloudServices never carries tokens. ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        response: { 200: InstitutionResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => ({ success: true, data: await service.getInstitution(authOf(request), request.params.id) }),
  );

  app.patch(
    '/api/admin/institution/:id',
    {
      schema: {
        tags,
        summary: 'Update an institution',
        description:
          `Needs institutions.edit on it. Institution admins may edit their own institution (name, branding, texts, feature switches, URLs) but ` +
          `not ${ACCOUNT_LEVEL_INSTITUTION_FIELDS.join(', ')} (403): those belong to the account admin and the superadmin. ` +
          `The account never changes and the balance changes only through the credits routes (both are ignored here). URL fields: https: ` +
          `only (http: too outside production; javascript:, data:, * and non-URLs are a 400). ltiContextIds: each id belongs to one institution ` +
          `across all tenants; an id held by another institution is a 409 CONFLICT and nothing changes (duplicates in the list collapse). ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        body: PatchInstitutionBody,
        response: { 200: InstitutionResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => ({ success: true, data: await service.updateInstitution(authOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/admin/institution/:id',
    {
      schema: {
        tags,
        summary: 'Delete an institution with its enrolments and data',
        description:
          'Needs institutions.delete (superadmin, account admin of its account). Its vault files go from the file storage too, once the ' +
          `deletion is committed (best effort: a failure is logged). ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => {
      await service.deleteInstitution(authOf(request), request.params.id);
      return { success: true, message: 'Institution deleted' };
    },
  );

  app.post(
    '/api/admin/institution/:id/credits',
    {
      schema: {
        tags,
        summary: "Top up (or correct) an institution's balance: superadmins only",
        description:
          `Creates (or, negative, removes) credits: a superadmin's act only (credits.mint); an account admin gets 403 and moves the credits ` +
          `it holds with POST /api/admin/credits/transfer instead. One atomic statement adds amount and a credit_ledger row (kind topup, or ` +
          `correction when negative) records it in the same transaction; a negative amount that would take the balance below zero, or with ` +
          `more than 4 decimals, is a 400 and changes nothing. |amount| ≤ 1e9. ${SCOPE_NOTE} ${IDEMPOTENCY_NOTE}`,
        security: SECURED,
        params: IdParams,
        headers: IdempotencyHeaders,
        body: CreditsBody,
        response: { 200: CreditsResponse, ...errorResponses(400, 401, 403, 404, 409) },
      },
      ...admin,
    },
    async (request, reply) =>
      keyedCredits(request, reply, { route: 'institution-credits', id: request.params.id, body: request.body }, (keyed) =>
        service.addInstitutionCredits(authOf(request), request.params.id, request.body.amount, keyed),
      ),
  );

  // ───────────── users ─────────────

  app.post(
    '/api/admin/user',
    {
      schema: {
        tags,
        summary: 'Create a user',
        description:
          'Superadmin: any account and role. Account admin: users of its account, roles user or accountadmin. Institution admin: plain users ' +
          'of its account enrolled in at least one institution, all of which it administers. Except for a superadmin, every listed institution ' +
          'must belong to the account (400). An opening credits balance creates credits: superadmins only (403). A new member of an institution ' +
          'with poolCredits false receives its creditAward from the institution\'s balance, once per user and institution ever. An e-mail ' +
          'already in use (case-insensitive) is a 409 CONFLICT with the same body whichever tenant holds it; since e-mails are global login ' +
          'names that one bit cannot be hidden, so an admin other than a superadmin who collects ADMIN_EMAIL_CONFLICTS_PER_HOUR such refusals ' +
          'may create no user for the rest of that hour (429 with Retry-After, whatever the address): addresses cannot be harvested. ' +
          'An account or institution the caller cannot see is 404. The answer is the user record as GET /api/admin/user/{id} shows it ' +
          `to the caller (account, institution and memberships only where the caller may see them). ${SCOPE_NOTE}`,
        security: SECURED,
        body: CreateUserBody,
        response: { 201: AdminUserResponse, ...errorResponses(400, 401, 403, 404, 409, 429) },
      },
      ...admin,
    },
    async (request, reply) => reply.status(201).send({ success: true, data: await service.createUser(authOf(request), request.body) }),
  );

  app.get(
    '/api/admin/users',
    {
      schema: {
        tags,
        summary: 'List users',
        description:
          'Superadmin: all; account admin: users of its account; institution admin: members of the institutions it administers. Filters: ' +
          "account (space-separated ids of the users' home accounts), institution (members of it), search (literal case-insensitive substring " +
          "of e-mail, fname, lname). An account id that is not one of the caller's accounts (its home account or that of an institution it " +
          'is enrolled in) matches no user, as the records never show it: filtering by only such ids lists nothing (total 0), and with ' +
          'other ids it adds no user (a superadmin sees all). Likewise an institution the caller may not see (not of one of its accounts ' +
          'nor one it is enrolled in) matches no user, as memberships never show it: filtering by it lists nothing (total 0), as for an ' +
          'institution that does not exist (a superadmin sees all). ' +
          "Sorted by e-mail. memberships lists only institutions of the caller's accounts (and those it is enrolled in); institution, the " +
          "user's current institution, is null when it is not one of those, and account, the user's home account, is null when it is not one " +
          "of the caller's accounts (its home account or that of an institution it is enrolled in): a user of another tenant enrolled in an " +
          'institution of the caller shows neither (a superadmin sees all).',
        security: SECURED,
        querystring: UsersQuery,
        response: { 200: UsersListResponse, ...errorResponses(400, 401, 403) },
      },
      ...admin,
    },
    async (request) => service.listUsers(authOf(request), request.query),
  );

  app.get(
    '/api/admin/user/:id',
    {
      schema: {
        tags,
        summary: 'Read a user',
        description:
          'Superadmin any; account admin the users of its account; institution admin the members of institutions it administers. ' +
          "As in the listing, memberships and institution (the user's current institution, else null) show only institutions of the " +
          "caller's accounts or that it is enrolled in, and account (the user's home account) is null unless it is one of the caller's " +
          `accounts (a superadmin sees all). ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        response: { 200: AdminUserResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => ({ success: true, data: await service.getUser(authOf(request), request.params.id) }),
  );

  app.patch(
    '/api/admin/user/:id',
    {
      schema: {
        tags,
        summary: 'Update a user',
        description:
          'As reading, and: only a superadmin changes a superadmin; an account admin changes a user of its account only when every ' +
          'enrolment of the user is in its account; an institution admin (without account rights) changes only plain users (role user) ' +
          'of its account whose every enrolment is a user enrolment in an institution it administers (someone who is an admin anywhere, ' +
          'or a member of an institution it does not administer, is out of reach: 403). ' +
          'role: an account admin grants at most accountadmin, an institution admin only user. status disabled ends every session of the ' +
          'user at once; a new password also ends them. Nobody disables themselves (403, as nobody deletes themselves). A change that ' +
          'would leave the platform without an active superadmin (the last one demoted or disabled) is refused (403); the CLI ' +
          'create-admin makes a superadmin outside the API. The answer is the user record as GET /api/admin/user/{id} shows it to the ' +
          `caller (account, institution and memberships only where the caller may see them). ${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        body: PatchUserBody,
        response: { 200: AdminUserResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => ({ success: true, data: await service.updateUser(authOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/admin/user/:id',
    {
      schema: {
        tags,
        summary: 'Delete a user with their sessions, enrolments and personal data',
        description:
          `Needs users.delete (superadmin, account admin of the user's account; only a superadmin deletes a superadmin; same reach rules as PATCH). Nobody deletes themselves (403). ` +
          "Goes with the user: their sessions, enrolments, memory parameters, vault files and collections, history records and every assistant they own (private, institution_shared or personal; system assistants have no owner and stay). " +
          'Every vault file they uploaded goes, whatever its scope (personal, instance or account), its stored bytes with it once the deletion is committed (best effort: a failure is logged). ' +
          'A deletion that would leave the platform without an active superadmin is refused (403). ' +
          "Other users' history records made with one of those assistants are kept, with assistant null. " +
          `${SCOPE_NOTE}`,
        security: SECURED,
        params: IdParams,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => {
      await service.deleteUser(authOf(request), request.params.id);
      return { success: true, message: 'User deleted' };
    },
  );

  app.post(
    '/api/admin/user/:id/credits',
    {
      schema: {
        tags,
        summary: "Top up (or correct) a user's own balance: superadmins only",
        description:
          `Creates (or, negative, removes) credits: a superadmin's act only (credits.mint); account admins get 403 and use ` +
          `POST /api/admin/credits/transfer. One atomic statement adds amount, with its credit_ledger row (topup / correction) in the same ` +
          `transaction; a negative amount that would take the balance below zero, or with more than 4 decimals, is a 400 and changes nothing. ${SCOPE_NOTE} ${IDEMPOTENCY_NOTE}`,
        security: SECURED,
        params: IdParams,
        headers: IdempotencyHeaders,
        body: CreditsBody,
        response: { 200: CreditsResponse, ...errorResponses(400, 401, 403, 404, 409) },
      },
      ...admin,
    },
    async (request, reply) =>
      keyedCredits(request, reply, { route: 'user-credits', id: request.params.id, body: request.body }, (keyed) =>
        service.addUserCredits(authOf(request), request.params.id, request.body.amount, keyed),
      ),
  );

  app.post(
    '/api/admin/credits/transfer',
    {
      schema: {
        tags,
        summary: 'Move credits between two balances of one account',
        description:
          'Credits are conserved: only a superadmin creates them (the top-up routes); an account admin moves credits it holds. from and to ' +
          'each name one balance, {institution} or {user}. Needs credits.transfer (account admins, superadmins; institution admins and users 403) ' +
          'and, on each side, power over that balance: an institution of the caller\'s account (institutions.credits), or a user it may change ' +
          'as a whole (users.credits, same reach as PATCH /api/admin/user/{id}). A balance the caller cannot see is 404. Both balances must ' +
          'belong to one account, and differ (400). The debit is one conditional UPDATE (credits - amount where credits >= amount): a source ' +
          'that holds too little is a 400 and nothing moves, and concurrent transfers never overdraw it. The debit, the credit and their two ' +
          `ledger rows (transfer_out, transfer_in, sharing refId) are one transaction. ${SCOPE_NOTE} ${IDEMPOTENCY_NOTE}`,
        security: SECURED,
        headers: IdempotencyHeaders,
        body: TransferBody,
        response: { 200: TransferResponse, ...errorResponses(400, 401, 403, 404, 409) },
      },
      ...admin,
    },
    async (request, reply) =>
      keyedCredits(request, reply, { route: 'transfer', body: request.body }, (keyed) => service.transferCredits(authOf(request), request.body, keyed)),
  );

  // ───────────── memberships ─────────────

  app.post(
    '/api/admin/membership',
    {
      schema: {
        tags,
        summary: 'Enrol a user in an institution, or change their role there',
        description:
          '201 when the enrolment is new, 200 when it existed (role changed or unchanged). A new member of an institution with poolCredits ' +
          'false receives its creditAward, moved from the institution\'s balance (two award ledger rows), once per user and institution ' +
          'ever: leaving and joining again pays nothing; an institution that cannot cover the award pays none (and pays it at a later ' +
          'enrolment once funded). ' +
          'Needs memberships.edit on the institution. Except for a superadmin, a new enrolment or a raised role (user to admin) needs a ' +
          "user of the institution's account (403); an existing enrolment of a user of another account (made by a superadmin) may still " +
          "be lowered, or ended, by those who administer the institution. Account admins of the institution's account manage any enrolment there. An institution admin " +
          'enrols plain users as members, may not change or end the enrolment of a fellow admin (403), and grants admin only to a user ' +
          'it may change as a whole (see PATCH /api/admin/user/{id}). ' +
          SCOPE_NOTE,
        security: SECURED,
        body: MembershipBody,
        response: { 200: MembershipResponse, 201: MembershipResponse, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request, reply) => {
      const result = await service.enrol(authOf(request), request.body);
      return reply.status(result.created ? 201 : 200).send({ success: true, message: result.message, data: result.data });
    },
  );

  app.delete(
    '/api/admin/membership',
    {
      schema: {
        tags,
        summary: 'End the enrolment of a user in an institution',
        description:
          'Same permissions as POST, as for a lowered role: those who administer the institution end any enrolment there, that of a user of ' +
          `another account included (an institution admin: the user enrolments of plain users). 404 when the user is not enrolled there. ${SCOPE_NOTE}`,
        security: SECURED,
        body: MembershipDeleteBody,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) },
      },
      ...admin,
    },
    async (request) => {
      await service.unenrol(authOf(request), request.body);
      return { success: true, message: 'Enrolment ended' };
    },
  );

  return service;
}
