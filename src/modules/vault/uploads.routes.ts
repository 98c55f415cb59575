import multipart from '@fastify/multipart';
import { Type, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.js';
import { authOf, requireAuth, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import type { App } from '../../http/types.js';
import { envelope, errorResponses } from '../../shared/schemas.js';
import { SUPPORTED_FORMATS } from './ingest/formats.js';
import { presentUpload, UploadSchema } from './uploads.presenters.js';
import { ListUploadsQuery, PatchUploadBody, UploadEnvelope, UploadForm, UploadIdParams, UploadListEnvelope } from './uploads.schemas.js';
import { UploadsService, type UploadPart } from './uploads.service.js';

/** `attachment` with an ASCII fallback name and the exact name in RFC 5987 form (RFC 6266). */
export function contentDisposition(name: string): string {
  const fallback = name.replace(/[^\x20-\x7e]/g, '_').replace(/["\\]/g, '_') || 'file';
  const encoded = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${fallback}"; filename*=UTF-8''${encoded}`;
}

/** Uploads: multipart upload, list, get, download, update, delete (ingestion: ingest/workers.ts). */
export async function uploadRoutes(app: App, ctx: AppContext): Promise<void> {
  const { config } = ctx;
  const service = new UploadsService(ctx, ctx.providers.storage);
  const authenticated = requireAuth(ctx);
  const formLimits = { fileSize: config.uploadMaxBytes, files: 1, fields: 20, fieldSize: 64 * 1024, parts: 30 };
  const uploadRate = limits(app, { max: config.uploadRateLimitPerMinute, timeWindowMs: 60_000, key: (request) => `vault-upload:${authOf(request).userId}` });

  // Multipart parsing only for the upload route: registered in its own encapsulated scope.
  await app.register(async (scoped) => {
    await scoped.register(multipart, { limits: formLimits, throwFileSizeLimit: false });
    const r = scoped.withTypeProvider<TypeBoxTypeProvider>();
    r.post(
      '/api/user/files',
      {
        schema: {
          tags: ['vault'],
          summary: 'Upload a file into the vault',
          description:
            `multipart/form-data with one part \`file\` and optional fields (see the body), in any order. ` +
            'When the fields that decide the destination (scope, institution, collection) come before the file, a refusal (403, 400; a collection not found or not visible: 404) comes ' +
            'before any byte is stored; when none of them came first (curl -F order), the file is stored and the decision is taken with all ' +
            'fields, a refusal removing the stored bytes. If destination fields before the file were refused, the upload is refused ' +
            '(400 asking for the fields first if later fields would have allowed it). A NUL character in any field is a 400 naming it. ' +
            'File names are stored in Unicode NFC, last path segment only; control characters and bidi embeddings, overrides and ' +
            'isolates (U+202A–U+202E, U+2066–U+2069) become "_" (so "evil\\u202Etxt.exe" is stored as "evil_txt.exe", and its real ' +
            'extension decides), other invisible format characters (Unicode Cf) are removed; a name with nothing else left is a 400. ' +
            'file_title: NFC, format characters removed. ' +
            `Supported: ${SUPPORTED_FORMATS.join(', ')} (by extension, else by the media type sent); ` +
            `anything else is a 400 and nothing is stored. The bytes must agree with that format (sniffed from the first 4 KB): a PDF ` +
            'has %PDF- in its first 1 KB (where PDF readers look for it), a DOCX is a zip, text formats hold no binary signature (PNG, JPEG, zip, executables, ...) and few control ' +
            'bytes; otherwise 415 UNSUPPORTED_MEDIA_TYPE and nothing is stored (PNG bytes named .txt are refused, never indexed as text). ' +
            `At most ${config.uploadMaxBytes} bytes (UPLOAD_MAX_BYTES): over it, 413. ` +
            `Personal files count against the uploader's personal quota: ${config.personalMaxFiles} files (PERSONAL_MAX_FILES) and ` +
            `${config.personalMaxBytes} bytes (PERSONAL_MAX_BYTES), over the personal files not deleted; beyond either, 403 FORBIDDEN ` +
            'with details[0] = {field: "file", reason: "personal_quota", quota: "files" | "bytes", used, limit} (the user row is locked, so ' +
            'concurrent uploads count one at a time). ' +
            'The file is stored, then ingested in the background (extract → chunk → embed → index): the record starts in status ' +
            '`processing` (see `stage`, `progress`) and becomes `active` with `chunkCount`, or `error` with `error_message`. ' +
            'Extraction runs in a separate process with a heap limit (INGEST_WORKER_HEAP_MB) and a time limit (INGEST_TIMEOUT_SECONDS); ' +
            'DOCX containers are checked before inflating (total inflated size INGEST_MAX_INFLATED_BYTES, compression ratio ' +
            'INGEST_MAX_COMPRESSION_RATIO, no DTD or entities) and HTML deeper than 1024 elements is refused: such files end in `error` ' +
            'with an error_message that says which bound they passed, and are not retried. ' +
            'Scope defaults to the collection\'s scope, else `instance` when an institution is given or current, else `personal`. ' +
            'Instance and account files count against the institution\'s maxFiles (403 once reached, checked under a lock so ' +
            'concurrent uploads cannot exceed it); with disableFileUploadForUser only its administrators (vault.admin) may upload (403). ' +
            `At most ${config.uploadRateLimitPerMinute} uploads per user per minute (UPLOAD_RATE_LIMIT_PER_MINUTE): 429 with Retry-After.`,
          security: SECURED,
          consumes: ['multipart/form-data'],
          body: UploadForm,
          response: { 201: UploadEnvelope, ...errorResponses(400, 401, 403, 404, 413, 415, 429) },
        },
        // The body is a stream read by the handler; the schema above documents the form only.
        preValidation: [
          authenticated,
          async (request) => {
            if (request.isMultipart()) request.body = {};
          },
        ],
        preHandler: uploadRate,
      },
      async (request, reply) => {
        const parts = request.parts({ limits: formLimits }) as AsyncIterable<UploadPart>;
        const row = await service.create(authOf(request), parts);
        return reply.status(201).send({ success: true, data: presentUpload(row) });
      },
    );
  });

  app.get(
    '/api/user/files',
    {
      schema: {
        tags: ['vault'],
        summary: 'List vault files',
        description:
          'Without `scope`: your personal files plus, for the institution given (or your current one), its instance files and its ' +
          'account\'s shared files. With `scope`: that scope only (instance/account: of the institution given or current; of all ' +
          'your institutions when you have none). Private files of others never appear. Newest first.',
        security: SECURED,
        querystring: ListUploadsQuery,
        response: { 200: UploadListEnvelope, ...errorResponses(400, 401, 403) },
      },
      preValidation: authenticated,
    },
    async (request) => {
      const { rows, total, page, pageSize } = await service.list(authOf(request), request.query);
      return envelope(rows.map(presentUpload), total, page, pageSize);
    },
  );

  app.get(
    '/api/user/files/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'One vault file (poll it to follow ingestion)',
        security: SECURED,
        params: UploadIdParams,
        response: { 200: UploadEnvelope, ...errorResponses(400, 401, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: presentUpload(await service.get(authOf(request), request.params.id)) }),
  );

  app.get(
    '/api/user/files/:id/download',
    {
      schema: {
        tags: ['vault'],
        summary: 'Download the original bytes of a file',
        description: 'Served as an attachment with the stored media type and the original name (RFC 6266 `filename*`). Deleted files: 404.',
        security: SECURED,
        params: UploadIdParams,
        response: { 200: Type.Unsafe<unknown>({ type: 'string', format: 'binary', description: 'The file' }), ...errorResponses(400, 401, 404) },
      },
      preValidation: authenticated,
    },
    async (request, reply) => {
      const { upload, stream } = await service.download(authOf(request), request.params.id);
      reply
        .header('content-type', upload.mimetype)
        .header('content-length', String(upload.filesize))
        .header('content-disposition', contentDisposition(upload.originalname))
        .header('x-content-type-options', 'nosniff')
        .header('content-security-policy', "sandbox; default-src 'none'");
      return reply.send(stream);
    },
  );

  app.patch(
    '/api/user/files/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'Update a file: title, status, collection, privacy',
        description:
          'For the owner, or a vault administrator of its institution (instance) or account (account); others who see it get 403. ' +
          '`status` moves only between active, inactive and selected (409 while processing, after an error, or once deleted). ' +
          '`collection` must be a visible collection of the same scope and place; null moves the file to the vault root. ' +
          'Only the owner may change `is_private`.',
        security: SECURED,
        params: UploadIdParams,
        body: PatchUploadBody,
        response: { 200: UploadEnvelope, ...errorResponses(400, 401, 403, 404, 409) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: presentUpload(await service.update(authOf(request), request.params.id, request.body)) }),
  );

  app.delete(
    '/api/user/files/:id',
    {
      schema: {
        tags: ['vault'],
        summary: 'Delete a file',
        description:
          'Status becomes `deleted` and its chunks are removed in the same transaction, so it leaves search at once; the stored ' +
          'bytes are removed. Deleting a deleted file is a no-op. Owner or vault administrator only (403).',
        security: SECURED,
        params: UploadIdParams,
        response: { 200: Type.Object({ success: Type.Boolean(), message: Type.String(), data: UploadSchema }), ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, message: 'File deleted', data: presentUpload(await service.remove(authOf(request), request.params.id)) }),
  );
}
