import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isForeignKeyViolation, sqlState } from '../db/errors.js';
import { UpstreamError } from '../providers/llm/types.js';
import { AppError, errorBody, validationFailed, type ErrorCode, type ErrorDetail } from '../shared/errors.js';

interface AjvLikeError {
  instancePath?: string;
  message?: string;
  keyword?: string;
  params?: Record<string, unknown>;
}

/** Validation errors listed at most (app.ts lazyValidator); a request with more is told so. */
export const LISTED_ERRORS_MAX = 100;

/** Turns Ajv errors into `{field, message}` details with the field as a dotted path: the first problem of each field. */
function validationDetails(errors: AjvLikeError[], part: string | undefined): ErrorDetail[] {
  const seen = new Set<string>();
  return errors.flatMap((e) => {
    let field = (e.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.');
    if (e.keyword === 'required' && typeof e.params?.missingProperty === 'string') {
      field = field ? `${field}.${e.params.missingProperty}` : e.params.missingProperty;
    }
    if (e.keyword === 'additionalProperties' && typeof e.params?.additionalProperty === 'string') {
      field = field ? `${field}.${e.params.additionalProperty}` : e.params.additionalProperty;
    }
    const where = part ?? 'body';
    if (seen.has(field || where)) return [];
    seen.add(field || where);
    return [{ field: field || where, location: where, message: `${field || where} ${e.message ?? 'is invalid'}` }];
  });
}

const CONTRACT_CLIENT_STATUSES: Record<number, ErrorCode> = {
  400: 'VALIDATION_FAILED',
  401: 'UNAUTHENTICATED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  429: 'RATE_LIMITED',
};

/** 22P05 untranslatable character, 22021 invalid byte sequence, 22001 string too long, 22003 number out of range. */
const INPUT_SQL_STATES = new Set(['22P05', '22021', '22001', '22003']);

/** Rejects NUL characters anywhere in the JSON body, query or path: Postgres text cannot hold them. */
function findNul(value: unknown, path: string, depth = 0): string | null {
  if (typeof value === 'string') return value.includes('\u0000') ? path : null;
  if (depth > 32 || value === null || typeof value !== 'object') return null;
  for (const [k, v] of Object.entries(value)) {
    const hit = findNul(v, path ? `${path}.${k}` : k, depth + 1);
    if (hit) return hit;
  }
  return null;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Body fields (arrays of ids) whose malformed entries the route drops silently: entries holding a NUL (at any depth) are dropped, not refused with a 400. */
    idListsDroppingMalformed?: readonly string[];
  }
}

/**
 * One error handler for the whole API: every failure leaves in the contract's body
 * `{success:false, message, error:{code, details}}`, and no 5xx body says anything about internals.
 */
export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError | AppError | Error, request: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof AppError) {
      if (err.statusCode >= 500) request.log.error({ err }, err.message);
      for (const [k, v] of Object.entries(err.headers)) reply.header(k, v);
      return reply.status(err.statusCode).send(errorBody(err.code, err.message, err.details));
    }
    if (err instanceof UpstreamError) {
      // The provider's own words stay in the log: they may name hosts or models the caller should not see.
      request.log.warn({ err, upstreamStatus: err.status }, 'upstream provider failed');
      return reply.status(502).send(errorBody('UPSTREAM_FAILED', 'The model provider failed; try again later'));
    }
    // Postgres data exceptions that only input can cause (NUL or invalid characters, a string or a
    // number too large for its column) are 400s; any other database error is a fault of ours (500).
    const state = sqlState(err);
    if (state && INPUT_SQL_STATES.has(state)) {
      request.log.info({ sqlState: state, err }, 'request rejected by the database as invalid data');
      return reply.status(400).send(errorBody('VALIDATION_FAILED', 'The request contains a value the database cannot store (for example a NUL character or an out-of-range number)'));
    }
    // A record the request refers to was deleted by another request while this one ran: a conflict with
    // that request, not a fault of ours (each route checks what it is given before it writes).
    if (isForeignKeyViolation(err)) {
      request.log.warn({ sqlState: state, err }, 'a record this request refers to was deleted while it ran');
      return reply.status(409).send(errorBody('CONFLICT', 'A record this request refers to was deleted while the request was being processed'));
    }
    const fe = err as FastifyError & { validation?: AjvLikeError[]; validationContext?: string };
    if (fe.validation) {
      const details = validationDetails(fe.validation, fe.validationContext);
      const message =
        details.length === 1 && details[0]
          ? `Invalid request: ${details[0].message}`
          : details.length >= LISTED_ERRORS_MAX
            ? `Invalid request: ${LISTED_ERRORS_MAX} problems or more (the first ${LISTED_ERRORS_MAX} listed)`
            : `Invalid request: ${details.length} problems`;
      return reply.status(400).send(errorBody('VALIDATION_FAILED', message, details));
    }
    switch (fe.code) {
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return reply.status(400).send(errorBody('VALIDATION_FAILED', 'Malformed JSON body', [{ field: 'body', message: fe.message }]));
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
      case 'FST_REQ_FILE_TOO_LARGE':
        return reply.status(413).send(errorBody('PAYLOAD_TOO_LARGE', 'Request body is too large'));
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return reply.status(415).send(errorBody('UNSUPPORTED_MEDIA_TYPE', `Unsupported content type: ${request.headers['content-type'] ?? 'none'}`));
      case 'FST_INVALID_MULTIPART_CONTENT_TYPE':
        return reply.status(400).send(errorBody('VALIDATION_FAILED', 'Expected a multipart/form-data body', [{ field: 'body', message: fe.message }]));
    }
    const status = typeof fe.statusCode === 'number' ? fe.statusCode : 500;
    if (status >= 400 && status < 500) {
      // Client errors raised by Fastify or its plugins (bad content-length, aborted multipart, ...):
      // statuses of the contract keep theirs, any other 4xx (406, 414, ...) is a plain 400.
      const known = CONTRACT_CLIENT_STATUSES[status];
      return reply.status(known ? status : 400).send(errorBody(known ?? 'VALIDATION_FAILED', fe.message));
    }
    request.log.error({ err }, 'unhandled error');
    return reply.status(500).send(errorBody('INTERNAL', 'Internal server error'));
  });

  // In preHandler, i.e. after each route's authentication: an anonymous caller gets its 401 first.
  app.addHook('preHandler', (request, _reply, done) => {
    // lists of ids whose malformed entries a route drops silently (search-content's selectedUploadIds):
    // an entry with a NUL is one of those, dropped here rather than refused
    const lists = request.routeOptions.config.idListsDroppingMalformed;
    const body = request.body as Record<string, unknown> | null | undefined;
    if (lists && body && typeof body === 'object') {
      for (const name of lists) {
        const list = body[name];
        // an entry is malformed wherever its NUL is: a string holding one, or an object or array with one inside
        if (!Array.isArray(list)) continue;
        const kept = list.filter((v) => findNul(v, '') === null);
        if (kept.length !== list.length) body[name] = kept;
      }
    }
    for (const [part, value] of [['params', request.params], ['query', request.query], ['body', request.body]] as const) {
      const field = findNul(value, '');
      if (field !== null) {
        done(validationFailed(`${field || part} contains a NUL character`, [{ field: field || part, location: part, message: 'NUL characters are not allowed' }]));
        return;
      }
    }
    done();
  });

  app.setNotFoundHandler((request, reply) => {
    reply.status(404).send(errorBody('NOT_FOUND', `Route ${request.method} ${request.url.split('?')[0]} not found`));
  });
}
