import { Type, type Static } from '@fastify/type-provider-typebox';
import { Id, ListEnvelope, PageFields } from '../../shared/schemas.js';

const KeyName = Type.String({ minLength: 1, maxLength: 200, description: 'Name of the parameter (trimmed, not blank)' });
const KeyValue = Type.String({ maxLength: 10_000, description: 'Value (up to 10,000 characters)' });
const KeyDescription = Type.String({ maxLength: 2000 });
const KeyNamespace = Type.String({ minLength: 1, maxLength: 100, description: 'Namespace (trimmed, not blank); default `default`' });

export const MemoryInstitution = Type.Object(
  {
    _id: Type.String(),
    name: Type.String(),
    ainame: Type.String(),
    picture: Type.String(),
    personal: Type.Optional(Type.Boolean({ description: 'true for a personal row: it has no institution and the strings are empty' })),
  },
  { description: 'The institution a shared row belongs to; `{personal: true}` with empty strings for a personal row' },
);

export const MemoryParam = Type.Object({
  _id: Type.String(),
  key_name: Type.String(),
  key_value: Type.String(),
  key_description: Type.String(),
  key_namespace: Type.String(),
  shared: Type.Boolean({ description: 'Shared within an institution' }),
  created: Type.String({ format: 'date-time' }),
  updated: Type.String({ format: 'date-time' }),
  institution: MemoryInstitution,
  editable: Type.Boolean({ description: 'Whether the caller may change or delete it' }),
  isAuthor: Type.Boolean({ description: 'Whether the caller created it' }),
});

export const CreateMemoryBody = Type.Object({
  key_name: KeyName,
  key_value: KeyValue,
  key_description: Type.Optional(KeyDescription),
  key_namespace: Type.Optional(KeyNamespace),
  shared: Type.Optional(Type.Boolean({ default: false, description: 'true: shared with the members of the institution' })),
  institution: Type.Optional(Id('Institution of a shared row (default: your current institution; you must be a member)')),
});
export type CreateMemoryInput = Static<typeof CreateMemoryBody>;

export const UpdateMemoryBody = Type.Object({
  key_name: Type.Optional(KeyName),
  key_value: Type.Optional(KeyValue),
  key_description: Type.Optional(KeyDescription),
  key_namespace: Type.Optional(KeyNamespace),
  shared: Type.Optional(Type.Boolean({ description: 'Only the author may change it' })),
  institution: Type.Optional(Id('When sharing a personal row: its institution (default: your current one)')),
});
export type UpdateMemoryInput = Static<typeof UpdateMemoryBody>;

export const MemoryResponse = Type.Object({ success: Type.Boolean(), data: MemoryParam });
export const MemoryListResponse = Type.Object({ success: Type.Boolean(), data: Type.Array(MemoryParam) });

export const AdminUserMemoryResponse = Type.Object({
  success: Type.Boolean(),
  data: Type.Array(Type.Object({ institution: MemoryInstitution, items: Type.Array(MemoryParam) }), {
    description: 'One group per institution (personal rows in the `{personal: true}` group first), groups sorted by institution name',
  }),
});

export const AdminInstitutionMemoryQuery = Type.Object({ ...PageFields });
export const AdminInstitutionMemoryResponse = Type.Object({ ...ListEnvelope(MemoryParam).properties, institution: MemoryInstitution });

export const BulkDeleteBody = Type.Object({
  ids: Type.Optional(
    Type.Array(Id('Memory parameter id'), {
      maxItems: 5000,
      description: 'Only these rows (of this user / this institution), each re-authorized; rows you may not touch or that do not match are skipped and counted',
    }),
  ),
  namespace: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Only rows of this namespace, trimmed as stored (with ids: narrows them); blank is a 400' })),
  shared: Type.Optional(Type.Boolean({ description: 'Only shared (true) or only personal (false) rows (with ids: narrows them)' })),
});
export type BulkDeleteInput = Static<typeof BulkDeleteBody>;

export const BulkDeleteResponse = Type.Object({
  success: Type.Boolean(),
  deletedCount: Type.Integer({ description: 'Rows deleted' }),
  skippedCount: Type.Integer({ description: 'Selected rows (or requested ids) that were not deleted: not yours to administer, or not found' }),
  message: Type.String(),
});

export const UserIdParams = Type.Object({ userId: Id('User id') });
export const InstIdParams = Type.Object({ instId: Id('Institution id') });
