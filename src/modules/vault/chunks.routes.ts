import type { AppContext } from '../../context.js';
import { authOf, requireAuth, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import type { App } from '../../http/types.js';
import { errorResponses } from '../../shared/schemas.js';
import { ChunkEnvelope, ChunkIdParams, ChunkListEnvelope, ChunkListQuery, FileIdParams, SanitizeResponse, UpdateChunkBody } from './chunks.schemas.js';
import { ChunksService } from './chunks.service.js';

/** Embedding chunks: get, list by upload, update (re-embed), sanitize preview. */
export async function chunkRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new ChunksService(ctx);
  const authenticated = requireAuth(ctx);
  const { config } = ctx;
  const sanitizeRate = limits(app, { max: config.sanitizeRateLimitPerMinute, timeWindowMs: 60_000, key: (request) => `vault-sanitize:${authOf(request).userId}` });
  const readable = "Chunks are readable once the file's ingestion has finished: while it is `processing`, and once it is deleted, there are none.";

  app.get(
    '/api/user/files/:id/chunks',
    {
      schema: {
        tags: ['vault'],
        summary: "A file's embedding chunks, in reading order",
        description: `Paginated (page from 1, pageSize 1 to 1000, default 100). A file you cannot see is a 404. ${readable}`,
        security: SECURED,
        params: FileIdParams,
        querystring: ChunkListQuery,
        response: { 200: ChunkListEnvelope, ...errorResponses(400, 401, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => service.listForUpload(authOf(request), request.params.id, request.query.page ?? 1, request.query.pageSize ?? 100),
  );

  app.get(
    '/api/user/embedding/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'One embedding chunk',
        description: `A chunk is as visible as its file: otherwise 404. ${readable}`,
        security: SECURED,
        params: ChunkIdParams,
        response: { 200: ChunkEnvelope, ...errorResponses(400, 401, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.get(authOf(request), request.params.id) }),
  );

  app.put(
    '/api/user/embedding/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'Save new text for a chunk (re-embeds and re-indexes it)',
        description:
          'Body: `sanitizedText` (the sanitize preview) or `text` (a manual edit), exactly one, 1 to 100000 characters and not blank. ' +
          'The token count is recounted, the vector recomputed and the full-text index rebuilt, together with the text in one transaction. ' +
          'Needs the right to change the file (its owner, or `vault.admin` over its institution/account): else 403. A chunk of a file still ' +
          'processing, or deleted, is a 404. 409 while the stored vectors come from another embedder (checked in the write transaction; run ' +
          'the re-embed command first: vectors of two models are never mixed). ' +
          'An embedding provider failure: 502 and nothing changes.',
        security: SECURED,
        params: ChunkIdParams,
        body: UpdateChunkBody,
        response: { 200: ChunkEnvelope, ...errorResponses(400, 401, 403, 404, 409, 502) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.update(authOf(request), request.params.id, request.body) }),
  );

  app.post(
    '/api/user/embedding/:id/sanitize',
    {
      schema: {
        tags: ['vault'],
        summary: 'AI clean-up preview of a chunk (not saved)',
        description:
          "No body. Sends the chunk text to the summary model of the file's institution (the institution's override, else the provider's " +
          'default; personal files: the default) to remove navigation, boilerplate and encoding artifacts and to normalise whitespace, ' +
          'without summarising. Nothing is saved: save the preview with PUT /api/user/embedding/{id} `{sanitizedText}`. ' +
          "`tokensUsed` (input + output) is added to the file's `tokens_used`. Only those who may change the file (its owner, or `vault.admin` " +
          'over its institution/account) may ask for a preview, since only they can save it: others who see it get 403. A chunk of a file still ' +
          'processing, or deleted, is a 404. The provider failing after its retries: 502 UPSTREAM_FAILED. A chunk longer than one ' +
          'call can answer (8,000 characters or 7,000 tokens) is sent in pieces cut at paragraph, line, sentence or word breaks, and the ' +
          'answers are joined: the preview is never shortened. An answer the provider stops at its length limit is a 502, not a shorter text ' +
          '(the tokens of the calls made are counted). ' +
          `At most ${config.sanitizeRateLimitPerMinute} calls per user per minute (SANITIZE_RATE_LIMIT_PER_MINUTE): 429 with Retry-After.`,
        security: SECURED,
        params: ChunkIdParams,
        response: { 200: SanitizeResponse, ...errorResponses(400, 401, 403, 404, 429, 502) },
      },
      preValidation: authenticated,
      preHandler: sanitizeRate,
    },
    async (request) => service.sanitize(authOf(request), request.params.id),
  );
}
