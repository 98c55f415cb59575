import { Type, type Static } from '@fastify/type-provider-typebox';
import { Id, ListEnvelope, Nullable, PageFields } from '../../shared/schemas.js';

export const SessionsListBody = Type.Object({
  account: Type.Optional(Type.String({ maxLength: 4000, description: 'Account id, or several separated by spaces (malformed ids: 400)' })),
  institution: Type.Optional(Id('Only sessions opened in (switched to) this institution')),
  usersearch: Type.Optional(Type.String({ maxLength: 200, description: 'Case-insensitive substring of the e-mail, first or last name; %, _ and regex characters match literally, spaces included; a blank one is no filter' })),
  daterange: Type.Optional(
    Type.Array(Type.String({ format: 'date-time' }), {
      minItems: 2,
      maxItems: 2,
      description: '[startDate, endDate]: sessions active during the range (created before its end, last active after its start). Default: the last 30 days',
    }),
  ),
  page: PageFields.page,
  // No schema default here: a default would always win over the deprecated limitsearch alias.
  pageSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000, description: 'Items per page (1 to 5000; default 100)' })),
  limitsearch: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000, deprecated: true, description: 'Deprecated alias of pageSize (pageSize wins when both are given)' })),
});
export type SessionsListInput = Static<typeof SessionsListBody>;

export const SessionItem = Type.Object({
  _id: Type.String(),
  user: Type.Object({ _id: Type.String(), email: Type.String(), fname: Type.String(), lname: Type.String() }),
  account: Nullable(Type.String({ description: "The user's home account; null when it is not one of the caller's accounts (a superadmin sees all)" })),
  institution: Nullable(Type.String({ description: 'The institution the session was opened in (switched to); null without one, or when the caller may not see it' })),
  ip: Type.String(),
  ua: Type.String(),
  created: Type.String({ format: 'date-time' }),
  lastActivityAt: Type.String({ format: 'date-time' }),
  expiresAt: Type.String({ format: 'date-time' }),
  revoked: Type.Boolean(),
});

export const SessionsListResponse = ListEnvelope(SessionItem);
