import type { AppContext } from '../../context.js';
import { authOf, requireAuth, requirePermission, SECURED } from '../../http/auth.js';
import { absentBodyIsEmpty, type App } from '../../http/types.js';
import { errorResponses, IdParams, SuccessOnly } from '../../shared/schemas.js';
import {
  AdminInstitutionMemoryQuery,
  AdminInstitutionMemoryResponse,
  AdminUserMemoryResponse,
  BulkDeleteBody,
  BulkDeleteResponse,
  CreateMemoryBody,
  InstIdParams,
  MemoryListResponse,
  MemoryResponse,
  UpdateMemoryBody,
  UserIdParams,
} from './memory.schemas.js';
import { MemoryService } from './memory.service.js';
import { MEMORY_DELETE, MEMORY_READ } from './memory.policy.js';

const tags = ['memory'];

const ACCESS =
  'A personal row (shared false) is seen and changed by its author only. A shared row belongs to one institution: its members read it, ' +
  'its author and the admins of that institution (institution admin, account admin of its account, superadmin) change it, while they are ' +
  'members of it (leaving an institution leaves one\'s shared rows to it; an admin enrolled nowhere uses the admin memory routes); only the ' +
  'author turns sharing on or off. A row you cannot read is 404; one you can read but not change is 403.';

const ADMIN_ACCESS =
  'Per row: a shared row needs the permission on its institution (institution admin there, account admin of its account, superadmin); ' +
  "a personal row needs it on the author's home account as a whole (account admin of that account, superadmin): institution admins never " +
  'see personal rows. A plain user gets 403; a user or institution of an account you have nothing to do with is 404; one you can see ' +
  'but do not administer is 403.';

/** Memory parameters (spec "Memory", contract §7). */
export async function memoryRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new MemoryService(ctx);
  const authenticated = requireAuth(ctx);

  app.get(
    '/api/user/memory',
    {
      schema: {
        tags,
        summary: "The caller's memory parameters: personal ones and those shared in the caller's institutions",
        description: `Newest first; at most 5000 rows. editable and isAuthor are from the caller's point of view. ${ACCESS}`,
        security: SECURED,
        response: { 200: MemoryListResponse, ...errorResponses(401) },
      },
      preValidation: authenticated,
    },
    // Sent as the service serialized and encoded it (per-row JSON memoized per cached row, the whole
    // answer per session while its lists are unchanged): running the rows through the response schema's
    // serializer on every request was the route's main cost. The schema stays for the OpenAPI document;
    // the test checks the body against its serializer.
    async (request, reply) => reply.type('application/json; charset=utf-8').send(await service.listJson(authOf(request))),
  );

  app.post(
    '/api/user/memory',
    {
      schema: {
        tags,
        summary: 'Create a memory parameter',
        description:
          'key_name and key_value are required; key_namespace defaults to `default`, shared to false. A shared row goes to `institution` ' +
          `(default: your current institution; you must be a member, 403 otherwise). ${ACCESS}`,
        security: SECURED,
        body: CreateMemoryBody,
        response: { 201: MemoryResponse, ...errorResponses(400, 401, 403) },
      },
      preValidation: authenticated,
    },
    async (request, reply) => reply.status(201).send({ success: true, data: await service.create(authOf(request), request.body) }),
  );

  app.put(
    '/api/user/memory/:id',
    {
      schema: {
        tags,
        summary: 'Update a memory parameter',
        description: `Every field is optional. Sharing a personal row puts it in \`institution\` (default: your current one). ${ACCESS}`,
        security: SECURED,
        params: IdParams,
        body: UpdateMemoryBody,
        response: { 200: MemoryResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.update(authOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/user/memory/:id',
    {
      schema: {
        tags,
        summary: 'Delete a memory parameter (hard delete)',
        description: ACCESS,
        security: SECURED,
        params: IdParams,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => {
      await service.remove(authOf(request), request.params.id);
      return { success: true, message: 'Memory parameter deleted' };
    },
  );

  // ───────────── administration ─────────────

  app.get(
    '/api/admin/memory/user/:userId',
    {
      schema: {
        tags,
        summary: "A user's memory parameters grouped by institution",
        description: `Rows the user authored that you may read, one group per institution; personal rows in the \`{personal: true}\` group; at most 5000 rows (personal first, then by institution name, newest first in each). editable: you may change it through PUT /api/user/memory/{id} (what these routes list to you, you may also delete through them when you hold admin.memory.delete). ${ADMIN_ACCESS}`,
        security: SECURED,
        params: UserIdParams,
        response: { 200: AdminUserMemoryResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: requirePermission(ctx, MEMORY_READ),
    },
    async (request) => ({ success: true, data: await service.adminListUser(authOf(request), request.params.userId) }),
  );

  app.get(
    '/api/admin/memory/institution/:instId',
    {
      schema: {
        tags,
        summary: "An institution's shared memory parameters",
        description: `Paginated (page, pageSize 1..5000, default 100), newest first. ${ADMIN_ACCESS}`,
        security: SECURED,
        params: InstIdParams,
        querystring: AdminInstitutionMemoryQuery,
        response: { 200: AdminInstitutionMemoryResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: requirePermission(ctx, MEMORY_READ),
    },
    async (request) => service.adminListInstitution(authOf(request), request.params.instId, request.query),
  );

  app.delete(
    '/api/admin/memory/user/:userId',
    {
      schema: {
        tags,
        summary: "Bulk hard delete of a user's memory parameters",
        description:
          'With `ids`: only those rows of this user, each re-authorized; ids of other users, unknown ids and rows you may not touch are ' +
          'skipped and counted in skippedCount. Without `ids`: the rows of this user selected by `namespace` and `shared` (both optional; ' +
          'no filter selects every row of the user), of which the ones you may not touch are skipped and counted. `ids` together with a ' +
          `filter: only the listed rows that also match it (the others are skipped and counted). One transaction; 200 {success, deletedCount, skippedCount, message}. ${ADMIN_ACCESS}`,
        security: SECURED,
        params: UserIdParams,
        body: BulkDeleteBody,
        response: { 200: BulkDeleteResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: [...requirePermission(ctx, MEMORY_DELETE), absentBodyIsEmpty],
    },
    async (request) => service.adminDeleteUser(authOf(request), request.params.userId, request.body),
  );

  app.delete(
    '/api/admin/memory/institution/:instId',
    {
      schema: {
        tags,
        summary: "Bulk hard delete of an institution's shared memory parameters",
        description:
          'Only shared rows of this institution. With `ids`: only those rows, each re-authorized (ids of other institutions, personal rows ' +
          'and unknown ids are skipped and counted; a filter given as well narrows them). Without: selected by `namespace` (and `shared`, ' +
          'which can only select shared rows here). ' +
          `One transaction; 200 {success, deletedCount, skippedCount, message}. ${ADMIN_ACCESS}`,
        security: SECURED,
        params: InstIdParams,
        body: BulkDeleteBody,
        response: { 200: BulkDeleteResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: [...requirePermission(ctx, MEMORY_DELETE), absentBodyIsEmpty],
    },
    async (request) => service.adminDeleteInstitution(authOf(request), request.params.instId, request.body),
  );
}
