import type { AppContext } from '../../context.js';
import { authOf, requireAuth, SECURED } from '../../http/auth.js';
import type { App } from '../../http/types.js';
import { errorResponses, IdParams, SuccessOnly } from '../../shared/schemas.js';
import { CreateSettingBody, SettingResponse, SettingsListResponse, SettingsQuery, UpdateSettingBody } from './settings.schemas.js';
import { SettingsService } from './settings.service.js';

const tags = ['settings'];

const ACCESS =
  'Admins below are the institution admins of the setting’s institution, the account admin of its account and superadmins. Members read ' +
  'the settings of their institution except admin_only ones (admins only) and those with institution_shared false (their creator and ' +
  'admins only). A setting is changed or deleted by admins, by its creator (unless admin_only), or by any member who may read it when ' +
  'editable_others is true (unless admin_only). A setting you may not read is 404; one you may read but not change is 403.';

/** Settings (instance variables; spec "Settings", contract §7). */
export async function settingsRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new SettingsService(ctx);
  const authenticated = requireAuth(ctx);

  app.post(
    '/api/user/setting',
    {
      schema: {
        tags,
        summary: 'Create a setting (instance variable) in your current institution',
        description:
          'institution and user come from the access token (the institution of the session; none: 403); status is active and __v 0. ' +
          'A key that already exists in the institution is a 400 DUPLICATE_KEY, also under concurrent creates (a unique index decides, ' +
          `in one INSERT … ON CONFLICT DO NOTHING). Only admins create admin_only settings. Answers 200 {success, data, message}. ${ACCESS}`,
        security: SECURED,
        body: CreateSettingBody,
        response: { 200: SettingResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.create(authOf(request), request.body), message: 'Setting created' }),
  );

  app.get(
    '/api/user/settings',
    {
      schema: {
        tags,
        summary: 'List the settings of an institution that you may read',
        description: `institution defaults to your current one (one you are not a member or admin of is 404). Sorted by key; paginated. ${ACCESS}`,
        security: SECURED,
        querystring: SettingsQuery,
        response: { 200: SettingsListResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => service.list(authOf(request), request.query),
  );

  app.put(
    '/api/user/setting/:id',
    {
      schema: {
        tags,
        summary: 'Update a setting',
        description:
          'Every field optional; each update increments __v in the same statement. With __v in the body the update applies only if the setting ' +
          'is still at that revision (409 CONFLICT otherwise). A key taken in the institution is a 400 DUPLICATE_KEY. Only admins change ' +
          `admin_only. ${ACCESS}`,
        security: SECURED,
        params: IdParams,
        body: UpdateSettingBody,
        response: { 200: SettingResponse, ...errorResponses(400, 401, 403, 404, 409) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.update(authOf(request), request.params.id, request.body), message: 'Setting updated' }),
  );

  app.delete(
    '/api/user/setting/:id',
    {
      schema: {
        tags,
        summary: 'Delete a setting',
        description: ACCESS,
        security: SECURED,
        params: IdParams,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => {
      await service.remove(authOf(request), request.params.id);
      return { success: true, message: 'Setting deleted' };
    },
  );
}
