import type { AppContext } from '../../context.js';
import { authOf, requireAuth, SECURED } from '../../http/auth.js';
import type { App } from '../../http/types.js';
import { errorResponses } from '../../shared/schemas.js';
import {
  CollectionEnvelope,
  CollectionIdParams,
  CollectionListEnvelope,
  CreateCollectionBody,
  DeleteCollectionResponse,
  ListCollectionsQuery,
  PatchCollectionBody,
  SelectAllIdsBody,
  SelectAllIdsResponse,
} from './collections.schemas.js';
import { CollectionsService } from './collections.service.js';

/** Collections and select-all-ids. */
export async function collectionRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new CollectionsService(ctx);
  const authenticated = requireAuth(ctx);

  app.post(
    '/api/user/collections/select-all-ids',
    {
      schema: {
        tags: ['vault'],
        summary: 'All file and collection ids at one place of the vault, for bulk select-all',
        description:
          'The place is `parent` (a collection you can see; a foreign or unknown one is a 404) or, when `parent` is null or absent, ' +
          'the vault root of `scope` (required there, else 400) in `institution` (default: your current institution). ' +
          '`files` are the files directly at that place (not inside sub-collections); `collections` are its direct sub-collections, ' +
          'with `fileCount` = files directly in each (not recursive) that you can see, excluding deleted ones. ' +
          '`fileNameSearch` is a case-insensitive substring of `originalname`, matched literally (`%`, `_`, `\\` and regex characters have no special meaning); ' +
          'blank means no search. `status` keeps files of that status; `excluded` keeps every status except selected and deleted. ' +
          'Without `status`, deleted files are left out. When `fileNameSearch` or `status` is active, `filtered` is true and ' +
          '`collections`/`collectionIds` are empty. With `parent`, a `scope` that differs from the parent\'s is a 400 and `institution` is ignored. ' +
          'Only records you can see are returned.',
        security: SECURED,
        body: SelectAllIdsBody,
        response: { 200: SelectAllIdsResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => service.selectAllIds(authOf(request), request.body),
  );

  app.post(
    '/api/user/collection',
    {
      schema: {
        tags: ['vault'],
        summary: 'Create a collection',
        description:
          '`name` is required (trimmed, 1 to 200 characters); `color` must be #rrggbb. The scope is taken, in this order, from the parent ' +
          '(a child always lives in its parent\'s scope and institution/account), from `account_shared: true` (scope account), from `scope`, ' +
          'and otherwise defaults to `instance` when an institution is given or current, else `personal`. ' +
          '`institution` defaults to your current one and you must be a member of it (403). A parent you cannot see is a 404; ' +
          'a parent of another scope, institution or account, or contradicting fields (account_shared vs scope), are a 400.',
        security: SECURED,
        body: CreateCollectionBody,
        response: { 201: CollectionEnvelope, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request, reply) => {
      const data = await service.create(authOf(request), request.body);
      return reply.status(201).send({ success: true, data });
    },
  );

  app.get(
    '/api/user/collections',
    {
      schema: {
        tags: ['vault'],
        summary: 'List collections (one level of the tree)',
        description:
          'With `parent`: its direct sub-collections (a parent you cannot see is a 404). Without: root collections of `scope` ' +
          '(instance and account scope in `institution`, default your current institution); without `scope` too: your personal root ' +
          'collections plus, when an institution is given or current, its instance and account root collections. Sorted by name.',
        security: SECURED,
        querystring: ListCollectionsQuery,
        response: { 200: CollectionListEnvelope, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.list(authOf(request), request.query) }),
  );

  app.get(
    '/api/user/collection/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'One collection',
        security: SECURED,
        params: CollectionIdParams,
        response: { 200: CollectionEnvelope, ...errorResponses(400, 401, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.get(authOf(request), request.params.id) }),
  );

  app.patch(
    '/api/user/collection/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'Rename, recolour or move a collection',
        description:
          'Needs ownership, or `vault.admin` over its institution (instance) or account (account): else 403. `color: null` clears the colour. ' +
          '`parent` moves it (null: to the vault root); the new parent must be a visible collection of the same scope and the same ' +
          'institution/account/owner, and neither the collection itself nor one of its descendants (400). The scope never changes.',
        security: SECURED,
        params: CollectionIdParams,
        body: PatchCollectionBody,
        response: { 200: CollectionEnvelope, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.update(authOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/user/collection/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'Delete a collection (never its files)',
        description:
          'Needs the same rights as a change (403). In one transaction, the files in the collection (whatever their status) and its ' +
          'direct sub-collections (with their own subtrees) move to its parent, or to the vault root when it had none; then the collection is deleted.',
        security: SECURED,
        params: CollectionIdParams,
        response: { 200: DeleteCollectionResponse, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, message: 'Collection deleted', data: await service.remove(authOf(request), request.params.id) }),
  );
}
