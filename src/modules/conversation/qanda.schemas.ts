import { Type, type Static } from '@fastify/type-provider-typebox';
import { UUID_PATTERN } from '../../shared/ids.js';

export const QandaBody = Type.Object({
  id: Type.Optional(Type.Number({ minimum: 0, maximum: 9_007_199_254_740_991, description: 'Client-generated request id (epoch milliseconds); echoed as `id` of every RECEIVE_STREAM event' })),
  inputs: Type.Array(Type.String({ maxLength: 32_000 }), {
    minItems: 1,
    maxItems: 100,
    description: 'The user messages; the last one is the question (not blank). Earlier ones pair with `outputs` as previous turns.',
  }),
  outputs: Type.Optional(Type.Array(Type.String({ maxLength: 64_000 }), { maxItems: 100, description: 'Previous AI responses, for continuity; may be empty' })),
  requestArgs: Type.Optional(
    Type.Object({
      userISODate: Type.Optional(Type.String({ format: 'date-time', description: "The user's date and time (ISO 8601); default: the server's clock" })),
      userTimezone: Type.Optional(Type.String({ maxLength: 64, description: 'IANA time zone name (validated); default: the profile time zone' })),
      socketId: Type.Optional(Type.String({ maxLength: 64, description: 'Socket.IO id of a connected socket of the caller: the answer streams on RECEIVE_STREAM' })),
      institutionPublicId: Type.Optional(Type.String({ pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$', description: 'Ask in this institution (UUID); the caller must be enrolled' })),
      assistantId: Type.Optional(Type.String({ pattern: UUID_PATTERN, description: 'An assistant visible to the caller' })),
      selectedCourse: Type.Optional(
        Type.Object({
          course_id: Type.Optional(Type.Integer({ minimum: 0, maximum: 9_007_199_254_740_991 })),
          course_name: Type.Optional(Type.String({ maxLength: 500 })),
          assistant: Type.Optional(Type.Object({ _id: Type.Optional(Type.String({ maxLength: 64 })) })),
        }),
      ),
      ragOnly: Type.Optional(Type.Boolean()),
      ragIgnore: Type.Optional(Type.Boolean()),
      /** Accepted and ignored: unknown fields never fail a request. */
    }),
  ),
});
export type QandaInput = Static<typeof QandaBody>;

export const QandaResponse = Type.Object({
  success: Type.Boolean(),
  streamingFailed: Type.Boolean(),
  streamingError: Type.Optional(Type.String({ description: 'Why streaming failed (only when streamingFailed); outputs still hold the full answer' })),
  outputs: Type.Array(Type.String()),
  usage: Type.Number({ description: 'Tokens of all model calls of the request (input + output), as the provider reported them' }),
  credits: Type.Number({ description: 'Credits consumed by this request' }),
  creditsUsedTotal: Type.Number({ description: "The user's total credits consumed" }),
  creditsRemaining: Type.Number({ description: 'The balance the caller draws from (institution pool or own credits), after this request' }),
  query_duration_ms: Type.Number(),
  model: Type.String(),
  historyId: Type.String({ description: 'Id of the saved history record' }),
  promptMode: Type.String(),
});
export type QandaResult = Static<typeof QandaResponse>;
