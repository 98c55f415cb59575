import type { AppContext } from '../../context.js';
import { authOf, requirePermission, SECURED } from '../../http/auth.js';
import type { App } from '../../http/types.js';
import { errorResponses, IdParams } from '../../shared/schemas.js';
import { CloudProviderResponse, InstitutionIdParams, RevokeResponse, StoreCloudProviderBody } from './cloud.schemas.js';
import { CloudService } from './cloud.service.js';
import { CLOUD_REVOKE_TIMEOUT_MS } from './cloud.revoke.js';

const tags = ['cloud'];
const ACCESS =
  'Needs institutions.edit on the institution (its institution admins, the account admin of its account, superadmins). Without that ' +
  'permission anywhere (plain users) 403 before any lookup; an institution of an account you have nothing to do with 404; one you see ' +
  'but do not administer 403.';

/** Cloud-services token of an institution: store, and the spec's revoke (contract §7). */
export async function cloudRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new CloudService(ctx);
  // The permission gate runs before any lookup: a caller without institutions.edit anywhere is 403 whatever the id.
  const authenticated = requirePermission(ctx, 'institutions.edit');

  app.put(
    '/api/admin/institution/:id/cloudprovider',
    {
      schema: {
        tags,
        summary: "Store the institution's cloud-services token",
        description:
          'Stores {provider, accessToken, refreshToken?, expiresAt?} under cloudServices.cloudprovider, replacing what was there. Tokens are ' +
          'encrypted at rest (AES-256-GCM, key from ENCRYPTION_KEY) and never returned: institution records show only provider, connected ' +
          `and expiresAt. provider must have a revoke URL in CLOUD_REVOKE_URLS (400 otherwise). expiresAt that is a leap second (23:59:60), has an offset without minutes, or falls outside the years 1 to 9999 in UTC is a 400. Replacing a stored token does not revoke the old one at the provider (it may belong to the same grant); use the revoke route first to end it. ${ACCESS}`,
        security: SECURED,
        params: IdParams,
        body: StoreCloudProviderBody,
        response: { 200: CloudProviderResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.store(authOf(request), request.params.id, request.body), message: 'Cloud-services token stored' }),
  );

  app.delete(
    '/api/auth/cloudprovider/institution/:institutionId/revoke',
    {
      schema: {
        tags,
        summary: "Remove the institution's cloud-services token and revoke it at the provider",
        description:
          'Removes cloudServices.cloudprovider (atomically: the token is read and removed in one statement), then posts the token (and the ' +
          `refresh token, if stored) to the provider's revoke URL from CLOUD_REVOKE_URLS, best effort, with a ${CLOUD_REVOKE_TIMEOUT_MS / 1000} s timeout. ` +
          'The answer is 200 {success: true, message} whatever the provider did (the message says how the provider revoke went); with no ' +
          `token stored it is also 200 (nothing to revoke). ${ACCESS}`,
        security: SECURED,
        params: InstitutionIdParams,
        response: { 200: RevokeResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, message: await service.revoke(authOf(request), request.params.institutionId) }),
  );
}
