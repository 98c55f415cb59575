import { Type, type Static } from '@fastify/type-provider-typebox';
import { DateTime, Id, ListEnvelope, Nullable } from '../../shared/schemas.js';

/** page / pageSize without a pageSize default, so that the deprecated limitsearch can stand in for it. */
export const ListingPageFields = {
  page: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER, default: 1, description: '1-based page number (a page past the last is empty)' })),
  pageSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000, description: 'Items per page (1 to 5000; default 100)' })),
  limitsearch: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000, deprecated: true, description: 'Deprecated alias of pageSize (pageSize wins when both are given)' })),
};
import { TOOL_NAMES } from './tools.js';

const ToolEntry = Type.Object({
  tool: Type.Union(TOOL_NAMES.map((n) => Type.Literal(n)), { description: `One of ${TOOL_NAMES.join(', ')}` }),
  instructionsOverride: Type.Optional(Type.String({ maxLength: 2000, default: '', description: "Replaces the tool's description for the model" })),
});

const editable = {
  name: Type.String({ minLength: 1, maxLength: 200 }),
  description: Type.String({ maxLength: 2000 }),
  instructions: Type.String({ maxLength: 20_000 }),
  picture_url: Type.String({ maxLength: 2000 }),
  remember_history: Type.Integer({ minimum: 0, maximum: 1, description: '1: earlier turns of the thread (selectedCourse) are sent to the model' }),
  history_count: Type.Integer({ minimum: 0, maximum: 50, description: 'How many earlier turns' }),
  admin_only: Type.Boolean({ description: 'Only admins of the institution see and use it (admins only may set it)' }),
  institution_shared: Type.Boolean({ description: 'Members of the institution see and use it' }),
  editable_others: Type.Boolean({ description: 'Members who see it may change it' }),
  argument_1: Type.String({ maxLength: 2000 }),
  argument_2: Type.String({ maxLength: 2000 }),
  argument_3: Type.String({ maxLength: 2000 }),
  argument_4: Type.String({ maxLength: 2000 }),
  argument_5: Type.String({ maxLength: 2000 }),
  ragCollections: Type.Array(Id('Collection id'), { maxItems: 100, uniqueItems: true, description: 'Collections that restrict retrieval (each must be visible to the editor)' }),
  assistantToolMode: Type.Union([Type.Literal('all'), Type.Literal('selected'), Type.Literal('none')], { description: 'all: every tool; selected: the tools of assistantTools; none' }),
  assistantTools: Type.Array(ToolEntry, { maxItems: 10 }),
};

const { name: nameField, ...optionalFields } = editable;
export const CreateAssistantBody = Type.Object({
  name: nameField,
  ...Type.Partial(Type.Object(optionalFields)).properties,
  institution: Type.Optional(Nullable(Id('Institution of the assistant; default the current one; null: a personal assistant'))),
  system: Type.Optional(Type.Boolean({ description: 'No owner (a system assistant); admins of the institution only' })),
});
export type CreateAssistantInput = Static<typeof CreateAssistantBody>;

export const PatchAssistantBody = Type.Partial(Type.Object(editable));
export type PatchAssistantInput = Static<typeof PatchAssistantBody>;

export const AssistantSchema = Type.Object({
  _id: Type.String(),
  name: Type.String(),
  description: Type.String(),
  instructions: Type.String(),
  picture_url: Type.String(),
  liked_count: Type.Number(),
  remember_history: Type.Number(),
  history_count: Type.Number(),
  admin_only: Type.Boolean(),
  institution_shared: Type.Boolean(),
  editable_others: Type.Boolean(),
  created: DateTime(),
  argument_1: Type.String(),
  argument_2: Type.String(),
  argument_3: Type.String(),
  argument_4: Type.String(),
  argument_5: Type.String(),
  ragCollections: Type.Array(Type.String()),
  assistantToolMode: Type.String(),
  assistantTools: Type.Array(Type.Object({ tool: Type.String(), instructionsOverride: Type.String() })),
  institution: Nullable(Type.String()),
  owner: Nullable(Type.String({ description: 'Owner user id; null for a system assistant' })),
  liked: Type.Boolean({ description: 'Whether the caller likes it' }),
  user_data: Type.Object({ email: Type.String(), fname: Type.String(), lname: Type.String(), institution: Type.String(), accountType: Type.String() }),
  institution_data: Type.Object({ name: Type.String(), ainame: Type.String(), status: Type.String(), picture: Type.String() }),
  account_data: Type.Object({ name: Type.String(), status: Type.String() }),
});
export const MinimalAssistantSchema = Type.Object({ _id: Type.String(), name: Type.String(), institution: Nullable(Type.String()) });

export const AssistantEnvelope = Type.Object({ success: Type.Boolean(), data: AssistantSchema });
export const AssistantListEnvelope = Type.Object({ success: Type.Boolean(), data: Type.Array(AssistantSchema) });
export const AssistantsQuery = Type.Object({ institution: Type.Optional(Id('Institution whose assistants to list; default the current one')) });
export const LikeBody = Type.Object({ like: Type.Optional(Type.Boolean({ default: true, description: 'false removes your like' })) });
export const LikeResponse = Type.Object({ success: Type.Boolean(), liked: Type.Boolean(), liked_count: Type.Number() });

export const AdminAssistantsBody = Type.Object({
  minimum: Type.Optional(Type.Boolean({ default: false, description: 'true: items are {_id, name, institution}' })),
  institution: Type.Optional(Id('Only assistants of this institution')),
  account: Type.Optional(Type.String({ maxLength: 5000, description: 'Account id(s), space-separated' })),
  usersearch: Type.Optional(Type.String({ maxLength: 200, description: "Literal case-insensitive substring of the owner's e-mail, first or last name (spaces included; a blank one is no filter)" })),
  admin_only: Type.Optional(Type.Boolean({ description: 'true: only admin_only assistants' })),
  system_only: Type.Optional(Type.Boolean({ description: 'true: only assistants with no owner' })),
  ...ListingPageFields,
});
export type AdminAssistantsInput = Static<typeof AdminAssistantsBody>;
export const AdminAssistantsResponse = ListEnvelope(Type.Union([AssistantSchema, MinimalAssistantSchema]));
