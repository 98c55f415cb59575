import { Type, type Static } from '@fastify/type-provider-typebox';
import { MAX_EPOCH_MS } from '../../shared/date-time-field.js';
import { DateTime, Id, ListEnvelope, Nullable } from '../../shared/schemas.js';
import { ListingPageFields } from './assistants.schemas.js';

export const HistoriesBody = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100, description: 'Maximum number of records (default 100)' })),
  institution: Type.Optional(Nullable(Id('Institution id; default the current one. null: the personal space'))),
  course_id: Type.Optional(Type.Integer({ minimum: 0, maximum: 9_007_199_254_740_991, description: '0 matches records with course_id 0 or none' })),
  before: Type.Optional(Type.Number({ minimum: 0, maximum: MAX_EPOCH_MS, description: `Epoch ms: records created before (0 … ${MAX_EPOCH_MS}, i.e. up to 9999-12-31T23:59:59.999Z; beyond: 400)` })),
  after: Type.Optional(Type.Number({ minimum: 0, maximum: MAX_EPOCH_MS, description: `Epoch ms: records created after (0 … ${MAX_EPOCH_MS}, i.e. up to 9999-12-31T23:59:59.999Z; beyond: 400)` })),
  historyId: Type.Optional(Id('One specific record of the caller, whatever institution it was asked in (personal space included); with `institution` given, only if it belongs there')),
  search: Type.Optional(Type.String({ maxLength: 200, description: 'Case-insensitive regular expression (POSIX/Postgres syntax, no back-references) over input, inputs, output, outputs; the empty one matches every record. Counted repetitions may expand to at most 1,000 copies; the embedded options (?b), (?e) and (?x), which switch to another syntax, are refused (400); a search still running after 5 s over a long history is a 400 (narrow it with before, after, institution or course_id)' })),
  tools: Type.Optional(Type.Boolean({ description: 'true: full tool responses; otherwise responses over 80 characters are cut' })),
  allInstitutions: Type.Optional(Type.Boolean({ description: 'Every enrolled institution plus the personal space; overrides institution; course_id ignored' })),
});
export type HistoriesInput = Static<typeof HistoriesBody>;

const InstitutionSummary = Type.Union([
  Type.String(),
  Type.Object({ _id: Type.String(), name: Type.String(), ainame: Type.String(), picture: Type.String() }),
  Type.Object({ personal: Type.Literal(true) }),
]);

export const HistorySchema = Type.Object({
  id: Type.String(),
  created: DateTime(),
  credits: Type.Number(),
  usage: Type.Number(),
  discount: Type.Number(),
  institution: InstitutionSummary,
  user: Type.String(),
  favorite: Type.Boolean(),
  forgotten: Type.Boolean(),
  role_id: Type.String(),
  role_name: Type.String(),
  thumbUpDown: Nullable(Type.String()),
  feedback: Nullable(Type.String()),
  conversation_model: Type.String(),
  success: Type.Boolean(),
  in: Type.Object({ input: Type.String(), inputs: Type.Array(Type.String()) }),
  out: Type.Object({ outputs: Type.Array(Type.String()) }),
  assistant: Nullable(Type.Object({ _id: Type.String(), name: Type.String(), liked_count: Type.Number(), picture_url: Type.String() })),
  course_id: Nullable(Type.Number()),
  course_name: Nullable(Type.String()),
  tools: Type.Array(Type.Object({ tool: Type.String(), arguments: Type.Unknown(), response: Type.String() })),
  experimental: Type.Optional(Type.Boolean()),
  promptMode: Type.Optional(Type.String()),
  streamingFailed: Type.Boolean(),
  query_duration_ms: Type.Number(),
  error: Type.Optional(Type.String({ description: 'Why the turn failed (success false)' })),
});

export const HistoriesResponse = Type.Object({
  success: Type.Boolean(),
  data: Type.Array(HistorySchema),
  total: Type.Optional(Type.Number({ description: 'allInstitutions only: records matching the search, not capped by limit' })),
  totalInScope: Type.Optional(Type.Number({ description: 'allInstitutions only: records in the searchable scope, ignoring the search' })),
});

export const PatchHistoryBody = Type.Object({
  favorite: Type.Optional(Type.Boolean()),
  forgotten: Type.Optional(Type.Boolean({ description: 'true: the turn is no longer sent to the model as thread history' })),
  thumbUpDown: Type.Optional(Nullable(Type.Union([Type.Literal('up'), Type.Literal('down')]))),
  feedback: Type.Optional(Nullable(Type.String({ maxLength: 5000 }))),
});
export type PatchHistoryInput = Static<typeof PatchHistoryBody>;
export const HistoryEnvelope = Type.Object({ success: Type.Boolean(), data: HistorySchema });

export const FeedbacksBody = Type.Object({
  account: Type.Optional(Type.String({ maxLength: 5000, description: 'Account id(s), space-separated' })),
  institution: Type.Optional(Id('Only records of this institution')),
  usersearch: Type.Optional(Type.String({ maxLength: 200, description: "Literal case-insensitive substring of the asker's e-mail, first or last name (spaces included; a blank one is no filter)" })),
  ...ListingPageFields,
});
export type FeedbacksInput = Static<typeof FeedbacksBody>;

export const FeedbackSchema = Type.Object({
  _id: Type.String(),
  created: DateTime(),
  user: Type.Object({ _id: Type.String(), email: Type.String(), fname: Type.String(), lname: Type.String() }),
  account: Type.String(),
  institution: Nullable(Type.Object({ _id: Type.String(), name: Type.String(), ainame: Type.String(), picture: Type.String() })),
  assistant: Nullable(Type.Object({ _id: Type.String(), name: Type.String(), liked_count: Type.Number(), picture_url: Type.String() })),
  thumbUpDown: Nullable(Type.String()),
  feedback: Nullable(Type.String()),
  in: Type.Object({ input: Type.String() }),
  out: Type.Object({ outputs: Type.Array(Type.String()) }),
  conversation_model: Type.String(),
  success: Type.Boolean(),
});
export const FeedbacksResponse = ListEnvelope(FeedbackSchema);
