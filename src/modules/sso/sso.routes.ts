import type { AppContext } from '../../context.js';
import { authOf, requirePermission, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import type { App } from '../../http/types.js';
import { errorResponses, IdParams, SuccessOnly } from '../../shared/schemas.js';
import { CreateSsoProviderBody, PatchSsoProviderBody, SsoProviderResponse, SsoProvidersListResponse, SsoProvidersQuery, SsoTestResponse } from './sso.schemas.js';
import { SSO_TEST_TIMEOUT_MS, SsoService } from './sso.service.js';

const tags = ['sso'];
const ACCESS =
  'Providers belong to an account. Create, change and delete need sso.manage on it (its account admin, superadmins); read, list and test ' +
  'need sso.test (also the institution admins of institutions of that account). A plain user gets 403; a provider of an account you have ' +
  'nothing to do with is 404; one you see but may not act on is 403. The client secret is stored encrypted (AES-256-GCM) and never returned.';
const URLS =
  'issuer and tokenEndpoint must be absolute https: URLs without credentials (http: too while SSO_TEST_ALLOW_PRIVATE=true); a literal ' +
  'link-local or metadata address is always a 400, a literal private or loopback one unless SSO_TEST_ALLOW_PRIVATE=true.';
const SSO_TEST_PER_MINUTE = 10;

/** SSO identity providers and their connectivity test (contract §7). */
export async function ssoRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new SsoService(ctx);
  const gate = requirePermission(ctx, 'sso.test');

  app.post(
    '/api/admin/ssoProvider',
    {
      schema: {
        tags,
        summary: 'Create an SSO provider',
        description: `account defaults to your home account. ${URLS} ${ACCESS}`,
        security: SECURED,
        body: CreateSsoProviderBody,
        response: { 201: SsoProviderResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: gate,
    },
    async (request, reply) => reply.status(201).send({ success: true, data: await service.create(authOf(request), request.body) }),
  );

  app.get(
    '/api/admin/ssoProviders',
    {
      schema: {
        tags,
        summary: 'List SSO providers',
        description: `Providers of the accounts you may test in (superadmin: all), optionally only of \`account\` (space-separated ids). Sorted by name; paginated. ${ACCESS}`,
        security: SECURED,
        querystring: SsoProvidersQuery,
        response: { 200: SsoProvidersListResponse, ...errorResponses(400, 401, 403) },
      },
      preValidation: gate,
    },
    async (request) => service.list(authOf(request), request.query),
  );

  app.get(
    '/api/admin/ssoProvider/:id',
    {
      schema: { tags, summary: 'Read an SSO provider', description: ACCESS, security: SECURED, params: IdParams, response: { 200: SsoProviderResponse, ...errorResponses(400, 401, 403, 404) } },
      preValidation: gate,
    },
    async (request) => ({ success: true, data: await service.get(authOf(request), request.params.id) }),
  );

  app.patch(
    '/api/admin/ssoProvider/:id',
    {
      schema: {
        tags,
        summary: 'Update an SSO provider',
        description: `Every field optional; clientSecret null removes the secret. A tokenEndpoint on another origin (scheme, host, port) needs clientSecret in the same request (a new one, or null), else 400: a stored secret is never sent to a host it was not given for. ${URLS} ${ACCESS}`,
        security: SECURED,
        params: IdParams,
        body: PatchSsoProviderBody,
        response: { 200: SsoProviderResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: gate,
    },
    async (request) => ({ success: true, data: await service.update(authOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/admin/ssoProvider/:id',
    {
      schema: { tags, summary: 'Delete an SSO provider', description: ACCESS, security: SECURED, params: IdParams, response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) } },
      preValidation: gate,
    },
    async (request) => {
      await service.remove(authOf(request), request.params.id);
      return { success: true, message: 'SSO provider deleted' };
    },
  );

  app.post(
    '/api/admin/ssoProvider/test/:id',
    {
      schema: {
        tags,
        summary: "Check that an SSO provider's token endpoint is reachable",
        description:
          'No body. POSTs a client-credentials token request (client id and secret as HTTP Basic) to tokenEndpoint and answers 200 ' +
          '{success, reachable, status, message}: reachable when any HTTP answer came back, status the HTTP status seen (0 when none), ' +
          'success when reachable and the status is neither 404 nor 5xx (400/401 are how a live endpoint refuses a client). The whole test, ' +
          `redirects included (at most 3), is bounded by ${SSO_TEST_TIMEOUT_MS / 1000} s. Link-local and metadata addresses (169.254.0.0/16, fe80::/10, ` +
          'fd00:ec2::254, 100.100.100.200, ...) are never connected to, whether given literally, reached through DNS or through a redirect; ' +
          'private and loopback addresses only while SSO_TEST_ALLOW_PRIVATE=true. A refused address answers reachable false (or the status ' +
          `of the redirect that pointed there) with the reason in message. ${SSO_TEST_PER_MINUTE} tests per user per minute (429 beyond). ${ACCESS}`,
        security: SECURED,
        params: IdParams,
        response: { 200: SsoTestResponse, ...errorResponses(400, 401, 403, 404, 429) },
      },
      preValidation: gate,
      preHandler: limits(app, { max: SSO_TEST_PER_MINUTE, timeWindowMs: 60_000, key: (request) => `sso-test:${authOf(request).userId}` }),
    },
    async (request) => service.test(authOf(request), request.params.id),
  );
}
