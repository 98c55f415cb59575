import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';
import { notFound } from '../../shared/errors.js';
import { errorResponses } from '../../shared/schemas.js';
import { resolveAuth, tokenFromHeaders } from '../identity/auth-context.js';
import { BrandingBody, BrandingSchema, ContextLookupBody, ContextLookupResponse, PRIVATE_INSTITUTION_FIELDS } from './branding.schemas.js';
import { BrandingService } from './branding.service.js';

/** Clients may reuse a branding for a minute; after that they revalidate with If-None-Match (304). */
export const BRANDING_CACHE_CONTROL = 'public, max-age=60';

/** Whether an If-None-Match header names this ETag (weak comparison, lists and `*` allowed). */
export function matchesEtag(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((t) => t.trim().replace(/^W\//, '') === etag);
}

/** Context lookup and the public branding of a digital twin (spec "Institutions and branding", contract §7). */
export async function brandingRoutes(app: App, ctx: AppContext): Promise<BrandingService> {
  const service = new BrandingService(ctx);

  // Optional authentication: no token is fine (public projection); a token that is presented must be valid.
  const optionalAuth = async (request: FastifyRequest) => {
    const token = tokenFromHeaders(request.headers);
    if (token) request.auth = await resolveAuth(ctx.db, ctx.tokens, token, ctx.clock.now(), ctx.auth);
  };

  app.post(
    '/api/auth/getInstitutionsForContextid',
    {
      schema: {
        tags: ['branding'],
        summary: 'Institutions mapped to an LTI context id',
        description:
          'Institutions whose ltiContextIds contain ltiContextId exactly (at most 100, sorted by name). No token needed: without one each ' +
          `institution is the public projection (without ${PRIVATE_INSTITUTION_FIELDS.join(', ')}). With a token, institutions the caller is ` +
          'a member of or administers (institution admin, account admin of its account, superadmin) come as the full record of the spec; the ' +
          'others stay public. A token that is presented but invalid, expired or revoked is a 401. No match: an empty list.',
        security: [{}, { bearerAuth: [] }, { accessToken: [] }],
        body: ContextLookupBody,
        response: { 200: ContextLookupResponse, ...errorResponses(400, 401) },
      },
      preValidation: optionalAuth,
    },
    async (request) => ({ success: true, institutions: await service.institutionsForContext(request.auth, request.body.ltiContextId) }),
  );

  app.post(
    '/api/agent/branding',
    {
      schema: {
        tags: ['branding'],
        summary: 'Public branding of a digital twin by its publicId',
        description:
          'No authentication. 400 when publicId is not a UUID, 404 when no institution has it. The answer has no success field (spec) and ' +
          `carries Cache-Control "${BRANDING_CACHE_CONTROL}" and an ETag; a request whose If-None-Match names the current ETag gets 304 ` +
          'without a body. Served from an in-process cache that is invalidated whenever the institution is updated or deleted (through ' +
          'the invalidation bus, which a Redis pub/sub transport extends to every node); an unknown publicId is remembered for 10 s.',
        body: BrandingBody,
        response: { 200: BrandingSchema, 304: { type: 'null', description: 'Not modified' }, ...errorResponses(400, 404) },
      },
    },
    async (request: FastifyRequest<{ Body: { publicId: string } }>, reply: FastifyReply) => {
      const pending = service.branding(request.body.publicId.toLowerCase());
      const entry = pending instanceof Promise ? await pending : pending;
      if (!entry.found) throw notFound('Digital twin');
      reply.header('cache-control', BRANDING_CACHE_CONTROL).header('etag', entry.etag);
      if (matchesEtag(request.headers['if-none-match'], entry.etag)) return reply.code(304).send();
      // Already serialized once when cached: sent as is.
      return reply.type('application/json; charset=utf-8').send(entry.body);
    },
  );

  return service;
}
