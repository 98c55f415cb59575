import { Type, type Static } from '@fastify/type-provider-typebox';
import { UserSchema } from '../identity/identity.presenters.js';
import { Id, ListEnvelope, Nullable, PageFields } from '../../shared/schemas.js';

// ───────────── shared pieces ─────────────

const Email = (description?: string) => Type.String({ format: 'email', minLength: 3, maxLength: 254, description });
const Url = (description: string) => Type.String({ maxLength: 2048, description });
const Strings = (description: string, maxItems = 200) => Type.Array(Type.String({ maxLength: 2048 }), { maxItems, description });
const SearchTerm = Type.String({ maxLength: 200, description: 'Case-insensitive substring; % and _ match literally' });
const AccountFilter = Type.String({ maxLength: 1000, description: 'Account id, or several separated by spaces' });

export const ActiveStatus = Type.Enum(['active', 'inactive'], { description: 'active | inactive' });
export const UserStatus = Type.Enum(['active', 'disabled'], { description: 'active | disabled (a disabled user cannot log in and its sessions end)' });
export const GlobalRoleSchema = Type.Enum(['user', 'accountadmin', 'superadmin'], { description: 'Global role: user | accountadmin | superadmin' });
export const InstitutionRoleSchema = Type.Enum(['admin', 'user'], { description: 'Institution role: admin | user' });

export const CreditsBody = Type.Object({
  amount: Type.Number({ minimum: -1e9, maximum: 1e9, description: 'Credits to add; negative to correct (never below zero). Non-zero, |amount| ≤ 1e9, a multiple of 0.0001 (more decimals: 400)' }),
});
const Balance = Type.Object(
  { institution: Type.Optional(Id('Institution id')), user: Type.Optional(Id('User id')) },
  { description: 'Exactly one of institution / user' },
);
export const TransferBody = Type.Object({
  from: Balance,
  to: Balance,
  amount: Type.Number({ exclusiveMinimum: 0, maximum: 1e9, description: 'Credits to move: > 0, ≤ 1e9, a multiple of 0.0001' }),
});
const BalanceAfter = Type.Object({ institution: Type.Optional(Type.String()), user: Type.Optional(Type.String()), credits: Type.Number({ description: 'Balance after the transfer' }) });
export const TransferResponse = Type.Object({
  success: Type.Boolean(),
  data: Type.Object({ refId: Type.String({ description: 'Shared by the transfer_out and transfer_in ledger rows' }), amount: Type.Number(), from: BalanceAfter, to: BalanceAfter }),
});
export const CreditsResponse = Type.Object({ success: Type.Boolean(), data: Type.Object({ _id: Type.String(), credits: Type.Number() }) });

// ───────────── accounts ─────────────

export const AccountSchema = Type.Object({
  _id: Type.String(),
  name: Type.String(),
  managerEmail: Nullable(Type.String()),
  status: Type.String({ description: 'active | inactive' }),
  lastActivityAt: Nullable(Type.String({ format: 'date-time', description: 'When a user of the account last started a session' })),
  created: Type.String({ format: 'date-time' }),
  updated: Type.String({ format: 'date-time' }),
});

export const InstitutionsUsageSchema = Type.Object({
  count: Type.Number({ description: 'Number of institutions of the account' }),
  credits: Type.Number({ description: 'Sum of their balances' }),
  creditsUsed: Type.Number({ description: 'Sum of their consumed credits' }),
  creditsTotal: Type.Number({ description: 'credits + creditsUsed' }),
  creditsUsagePct: Type.Number({ description: 'creditsUsed / creditsTotal × 100, 2 decimals; 0 when creditsTotal is 0' }),
});

export const AccountListItem = Type.Object({
  _id: Type.String(),
  name: Type.String(),
  managerEmail: Type.Optional(Nullable(Type.String())),
  status: Type.Optional(Type.String()),
  lastActivityAt: Type.Optional(Nullable(Type.String({ format: 'date-time' }))),
  created: Type.Optional(Type.String({ format: 'date-time' })),
  updated: Type.Optional(Type.String({ format: 'date-time' })),
  institutionsUsage: Type.Optional(InstitutionsUsageSchema),
});

export const CreateAccountBody = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 200 }),
  managerEmail: Type.Optional(Email('E-mail address of the account manager')),
  status: Type.Optional(ActiveStatus),
});

export const PatchAccountBody = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  managerEmail: Type.Optional(Nullable(Email('E-mail address of the account manager; null clears it'))),
  status: Type.Optional(ActiveStatus),
});

export const AccountResponse = Type.Object({ success: Type.Boolean(), data: AccountSchema });

export const AccountsListBody = Type.Object({
  accountsearch: Type.Optional(Type.String({ maxLength: 200, description: 'Case-insensitive substring of the name or managerEmail; % and _ match literally' })),
  activeOnly: Type.Optional(Type.Boolean({ default: false, description: 'true: only accounts with lastActivityAt set' })),
  minimum: Type.Optional(Type.Boolean({ default: false, description: 'true: items are {_id, name} and pagination is bypassed (page 1, pageSize = total, hasMore false)' })),
  insitutionsUsage: Type.Optional(Type.Boolean({ default: false, description: 'Spelled so (spec). true: each item carries institutionsUsage' })),
  ...PageFields,
});
export type AccountsListInput = Static<typeof AccountsListBody>;

export const AccountsListResponse = ListEnvelope(AccountListItem);

// ───────────── institutions ─────────────

/** Every settable field of the spec's Institution and Branding tables (snake_case where the spec spells so). */
const institutionFields = {
  name: Type.String({ minLength: 1, maxLength: 200 }),
  ainame: Type.String({ minLength: 1, maxLength: 100, description: 'Display name of the AI' }),
  about: Type.String({ maxLength: 5000, description: "Description of the agent's purpose" }),
  picture: Url('Avatar URL'),
  picture_bg: Url('Light-mode background URL'),
  picture_dark_bg: Url('Dark-mode background URL; may be empty'),
  picture_animated: Url('Animated avatar URL; may be empty'),
  voice_agent_id: Type.String({ maxLength: 200, description: 'Voice agent identifier' }),
  creditAward: Type.Number({ minimum: 0, maximum: 1e9, description: 'Credits a new member receives when poolCredits is false; a multiple of 0.0001' }),
  maxCompletionTokens: Type.Integer({ minimum: 0, maximum: 1_000_000 }),
  maxFiles: Type.Integer({ minimum: 0, maximum: 10_000_000 }),
  status: ActiveStatus,
  allowJoining: Type.String({ minLength: 1, maxLength: 64, description: 'Joining policy (free text; default none)' }),
  questionType: Type.String({ minLength: 1, maxLength: 64, description: 'Question type (free text; default default)' }),
  rtVoice: Type.String({ maxLength: 100 }),
  joiningAdminOnly: Type.Boolean(),
  poolCredits: Type.Boolean({ description: "true: the institution's balance pays; false: each member's own balance" }),
  disableFileUploadForUser: Type.Boolean(),
  personalisationAsked: Type.Boolean(),
  locationEnabled: Type.Boolean(),
  rtEnabled: Type.Boolean(),
  rtAdminOnly: Type.Boolean(),
  displayAgentDetails: Type.Boolean(),
  disableAssistantsForUser: Type.Boolean(),
  publicAuthorizedUrls: Strings('Origins allowed to embed the public agent'),
  invoices_urls: Strings('Invoice URLs'),
  toolsDisabled: Strings('Disabled tool names'),
  ltiContextIds: Strings('LTI context URLs that map to this institution', 1000),
  assistantsDisabled: Strings('Disabled assistant ids'),
  contactEmail: Type.Union([Email(), Type.Literal('')], { description: 'Contact e-mail address; empty string clears it' }),
  summaryModel: Nullable(Type.String({ minLength: 1, maxLength: 200, description: 'Model for sanitize; null: the default' })),
  conversationModel: Nullable(Type.String({ minLength: 1, maxLength: 200, description: 'Model for conversations; null: the default' })),
};

type Optionalize<T extends Record<string, Parameters<typeof Type.Optional>[0]>> = { [K in keyof T]: ReturnType<typeof Type.Optional<T[K]>> };
function optional<T extends Record<string, Parameters<typeof Type.Optional>[0]>>(fields: T): Optionalize<T> {
  return Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, Type.Optional(v)])) as Optionalize<T>;
}

const { name, ainame, ...otherInstitutionFields } = institutionFields;

export const CreateInstitutionBody = Type.Object({
  account: Id('Owning account id'),
  name,
  ainame,
  credits: Type.Optional(Type.Number({ minimum: 0, maximum: 1e12, description: 'Opening balance; a multiple of 0.0001' })),
  ...optional(otherInstitutionFields),
});
export type CreateInstitutionInput = Static<typeof CreateInstitutionBody>;

export const PatchInstitutionBody = Type.Object(optional(institutionFields), {
  description: 'The account and the balance are not changed here (balance: the credits route).',
});
export type PatchInstitutionInput = Static<typeof PatchInstitutionBody>;

export const CloudServiceSchema = Type.Object({
  provider: Type.String(),
  connected: Type.Boolean({ description: 'A token is stored (it is never returned)' }),
  expiresAt: Nullable(Type.String()),
});

/** The spec's Institution as presented: every settable field, plus what the server derives or owns. */
export const InstitutionSchema = Type.Object({
  _id: Type.String(),
  id: Type.String(),
  account: Type.String(),
  ...institutionFields,
  credits: Type.Number(),
  creditsUsed: Type.Number(),
  creditsTotal: Type.Number({ description: 'credits + creditsUsed' }),
  creditsUsagePct: Type.Number({ description: 'creditsUsed / creditsTotal × 100, 2 decimals; 0 when creditsTotal is 0' }),
  publicId: Type.String({ format: 'uuid' }),
  cloudServices: Type.Record(Type.String(), CloudServiceSchema, { description: 'Connected cloud services; tokens are never returned' }),
  created: Type.String({ format: 'date-time' }),
  updated: Type.String({ format: 'date-time' }),
});

export const InstitutionResponse = Type.Object({ success: Type.Boolean(), data: InstitutionSchema });

export const InstitutionsQuery = Type.Object({
  ...PageFields,
  account: Type.Optional(AccountFilter),
  search: Type.Optional(SearchTerm),
});
export const InstitutionsListResponse = ListEnvelope(InstitutionSchema);

// ───────────── users ─────────────

export const MembershipItem = Type.Object({ institution: Type.String(), role: Type.String({ description: 'admin | user' }) });

export const AdminUserSchema = Type.Object({
  ...UserSchema.properties,
  account: Nullable(Type.String({ description: "The user's home account; null when it is not one of the caller's accounts (a superadmin sees all)" })),
  memberships: Type.Array(MembershipItem, { description: "Enrolments (only institutions of the caller's tenants are shown)" }),
});

export const AdminUserResponse = Type.Object({ success: Type.Boolean(), data: AdminUserSchema });

const Timezone = Type.String({ minLength: 1, maxLength: 64, description: 'IANA time zone name' });

export const CreateUserBody = Type.Object({
  email: Email('Unique (case-insensitive)'),
  password: Type.String({ minLength: 8, maxLength: 1024 }),
  fname: Type.String({ maxLength: 100 }),
  lname: Type.String({ maxLength: 100 }),
  account: Id('Home account id'),
  institutions: Type.Array(Type.Object({ institution: Id('Institution id'), role: InstitutionRoleSchema }), { maxItems: 200 }),
  credits: Type.Optional(Type.Number({ minimum: 0, maximum: 1e9, description: 'Opening balance (needs users.credits); a multiple of 0.0001' })),
  role: Type.Optional(GlobalRoleSchema),
  location: Type.Optional(Type.String({ maxLength: 200 })),
  timezone: Type.Optional(Timezone),
});
export type CreateUserInput = Static<typeof CreateUserBody>;

export const PatchUserBody = Type.Object({
  fname: Type.Optional(Type.String({ maxLength: 100 })),
  lname: Type.Optional(Type.String({ maxLength: 100 })),
  location: Type.Optional(Type.String({ maxLength: 200 })),
  timezone: Type.Optional(Timezone),
  status: Type.Optional(UserStatus),
  role: Type.Optional(GlobalRoleSchema),
  password: Type.Optional(Type.String({ minLength: 8, maxLength: 1024, description: 'New password; ends every session of the user' })),
});
export type PatchUserInput = Static<typeof PatchUserBody>;

export const UsersQuery = Type.Object({
  ...PageFields,
  account: Type.Optional(AccountFilter),
  institution: Type.Optional(Id('Only members of this institution')),
  search: Type.Optional(Type.String({ maxLength: 200, description: 'Case-insensitive substring of e-mail, first or last name; % and _ match literally' })),
});
export const UsersListResponse = ListEnvelope(AdminUserSchema);

// ───────────── memberships ─────────────

export const MembershipBody = Type.Object({ user: Id('User id'), institution: Id('Institution id'), role: InstitutionRoleSchema });
export const MembershipDeleteBody = Type.Object({ user: Id('User id'), institution: Id('Institution id') });
export const MembershipResponse = Type.Object({
  success: Type.Boolean(),
  message: Type.String(),
  data: Type.Object({ user: Type.String(), institution: Type.String(), role: Type.String(), created: Type.Boolean({ description: 'true when the enrolment is new' }) }),
});
