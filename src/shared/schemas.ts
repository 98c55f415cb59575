import { Type, type TSchema } from '@fastify/type-provider-typebox';
import { UUID_PATTERN } from './ids.js';

/** Error body of the contract (§1), referenced by every route's error responses. */
export const ErrorBodySchema = Type.Object(
  {
    success: Type.Literal(false),
    message: Type.String(),
    error: Type.Object({
      code: Type.String(),
      details: Type.Array(Type.Object({ field: Type.Optional(Type.String()), message: Type.String() }, { additionalProperties: true })),
    }),
  },
  { $id: 'ErrorBody', description: 'Error body of every failure' },
);

const errorRef = Type.Unsafe<unknown>({ $ref: 'ErrorBody#' });

/** Standard error responses to list in a route schema. */
export function errorResponses<const S extends readonly number[]>(...statuses: S): { [K in S[number]]: typeof errorRef } {
  const out: Record<number, typeof errorRef> = {};
  for (const s of statuses) out[s] = errorRef;
  return out as { [K in S[number]]: typeof errorRef };
}

/** Record ids are lower-case UUIDs (v7 from newId); anything else is a 400, not a lookup. */
export const Id = (description = 'Record id') => Type.String({ pattern: UUID_PATTERN, description });
export const IdParams = Type.Object({ id: Id() });
export const DateTime = (description?: string) => Type.String({ format: 'date-time', description });
export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
export const SuccessOnly = Type.Object({ success: Type.Boolean(), message: Type.Optional(Type.String()) });

/** The admin list envelope of the spec. */
export const ListEnvelope = <T extends TSchema>(item: T) =>
  Type.Object({
    success: Type.Boolean(),
    data: Type.Array(item),
    total: Type.Number(),
    hasMore: Type.Boolean(),
    page: Type.Number(),
    pageSize: Type.Number(),
    message: Type.String(),
  });

export const PageFields = {
  page: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER, default: 1, description: '1-based page number (a page past the last is empty)' })),
  pageSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000, default: 100, description: 'Items per page (1 to 5000)' })),
};

/**
 * The page a listing asked for (schema defaults: page 1, 100 per page) as SQL limit and offset. The spec
 * bounds page below only: a page far past the last is an empty page, its offset held within what SQL's
 * bigint and a double both represent exactly.
 */
export function pageWindow(query: { page?: number; pageSize?: number }) {
  const page = query.page ?? 1;
  const pageSize = query.pageSize ?? 100;
  return { page, pageSize, limit: pageSize, offset: Math.min((page - 1) * pageSize, Number.MAX_SAFE_INTEGER) };
}

export function envelope<T>(data: T[], total: number, page: number, pageSize: number, message = 'OK') {
  return { success: true, data, total, hasMore: page * pageSize < total, page, pageSize, message };
}

/**
 * The optional `Idempotency-Key` header of the routes whose retry must not act twice (Q&A, credit
 * movements; platform/idempotency.ts).
 */
export const IdempotencyHeaders = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 255,
      pattern: '^[\\x21-\\x7E]+$',
      description: 'Makes retries safe: a retry with the same key and request gets the first response again instead of acting twice (see the route)',
    }),
  ),
});

/** What the description of a route with IdempotencyHeaders says about them. */
export const IDEMPOTENCY_NOTE =
  'Retries: send an Idempotency-Key header (1-255 visible ASCII characters, new for each request of a user). A retry with the same key ' +
  'and the same request after it succeeded gets the same response again, with the header Idempotent-Replayed: true, and acts no second ' +
  'time; while the first is still running: 409 CONFLICT with Retry-After; the same key with a different request: 400; a request that ' +
  'fails gives its key back (its retry runs afresh). A running request holds its key by a lease its node renews every 15 s: one whose ' +
  'node went silent for 45 s (it died) loses the key to the next retry, which runs afresh, and if it is still alive after all gets ' +
  '409 CONFLICT and changes nothing. Keys are kept 24 hours.';
