import { Type, type Static } from '@fastify/type-provider-typebox';
import { Id, ListEnvelope, PageFields } from '../../shared/schemas.js';

const Key = Type.String({ minLength: 1, maxLength: 200, description: 'Unique within the institution (trimmed, in Unicode NFC, case-sensitive; no control or invisible formatting characters)' });
const Value = Type.String({ maxLength: 10_000 });

export const SettingSchema = Type.Object({
  _id: Type.String(),
  key: Type.String(),
  value: Type.Optional(Type.String()),
  institution: Type.String({ description: 'Institution id (from the caller’s context)' }),
  user: Type.String({ description: 'Id of the creator (empty when that user was deleted)' }),
  status: Type.String({ description: 'active | inactive; active on creation' }),
  admin_only: Type.Boolean(),
  institution_shared: Type.Boolean(),
  editable_others: Type.Boolean(),
  created: Type.String({ format: 'date-time' }),
  updated: Type.String({ format: 'date-time' }),
  __v: Type.Integer({ description: 'Revision counter: 0 on creation, +1 on every update' }),
});

export const CreateSettingBody = Type.Object({
  key: Key,
  value: Type.Optional(Value),
  admin_only: Type.Optional(Type.Boolean({ default: false, description: 'Only institution admins may read or change it' })),
  editable_others: Type.Optional(Type.Boolean({ default: false, description: 'false: only its creator (and admins) may change it' })),
  institution_shared: Type.Optional(Type.Boolean({ default: true, description: 'false: only its creator (and admins) may read it' })),
});
export type CreateSettingInput = Static<typeof CreateSettingBody>;

export const UpdateSettingBody = Type.Object({
  key: Type.Optional(Key),
  value: Type.Optional(Type.Union([Value, Type.Null()], { description: 'null removes the value' })),
  status: Type.Optional(Type.Enum(['active', 'inactive'])),
  admin_only: Type.Optional(Type.Boolean({ description: 'Admins only' })),
  editable_others: Type.Optional(Type.Boolean()),
  institution_shared: Type.Optional(Type.Boolean()),
  __v: Type.Optional(Type.Integer({ minimum: 0, maximum: 2_147_483_647, description: 'Optimistic concurrency: the update applies only if the setting is still at this revision (409 otherwise)' })),
});
export type UpdateSettingInput = Static<typeof UpdateSettingBody>;

export const SettingResponse = Type.Object({ success: Type.Boolean(), data: SettingSchema, message: Type.String() });

export const SettingsQuery = Type.Object({
  ...PageFields,
  institution: Type.Optional(Id('Institution (default: your current institution)')),
  key: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Only the setting with this key (trimmed and compared in Unicode NFC)' })),
});
export const SettingsListResponse = ListEnvelope(SettingSchema);
