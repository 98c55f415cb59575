import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { UpstreamError } from '../providers/llm/types.js';
import { AppError, errorBody, type ErrorDetail } from '../shared/errors.js';

interface AjvLikeError {
  instancePath?: string;
  message?: string;
  keyword?: string;
  params?: Record<string, unknown>;
}

/** Turns Ajv errors into `{field, message}` details with the field as a dotted path. */
function validationDetails(errors: AjvLikeError[], part: string | undefined): ErrorDetail[] {
  return errors.map((e) => {
    let field = (e.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.');
    if (e.keyword === 'required' && typeof e.params?.missingProperty === 'string') {
      field = field ? `${field}.${e.params.missingProperty}` : e.params.missingProperty;
    }
    if (e.keyword === 'additionalProperties' && typeof e.params?.additionalProperty === 'string') {
      field = field ? `${field}.${e.params.additionalProperty}` : e.params.additionalProperty;
    }
    const where = part ?? 'body';
    return { field: field || where, location: where, message: `${field || where} ${e.message ?? 'is invalid'}` };
  });
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
    const fe = err as FastifyError & { validation?: AjvLikeError[]; validationContext?: string };
    if (fe.validation) {
      const details = validationDetails(fe.validation, fe.validationContext);
      const message = details.length === 1 && details[0] ? `Invalid request: ${details[0].message}` : `Invalid request: ${details.length} problems`;
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
      // Client errors raised by Fastify or its plugins (bad content-length, aborted multipart, ...).
      const code = status === 401 ? 'UNAUTHENTICATED' : status === 403 ? 'FORBIDDEN' : status === 404 ? 'NOT_FOUND' : status === 413 ? 'PAYLOAD_TOO_LARGE' : status === 429 ? 'RATE_LIMITED' : 'VALIDATION_FAILED';
      return reply.status(status).send(errorBody(code, fe.message));
    }
    request.log.error({ err }, 'unhandled error');
    return reply.status(500).send(errorBody('INTERNAL', 'Internal server error'));
  });

  app.setNotFoundHandler((request, reply) => {
    reply.status(404).send(errorBody('NOT_FOUND', `Route ${request.method} ${request.url.split('?')[0]} not found`));
  });
}
