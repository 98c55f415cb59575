import { Type } from '@fastify/type-provider-typebox';
import { UUID_PATTERN } from '../../shared/ids.js';
import { Id, ListEnvelope, PageFields } from '../../shared/schemas.js';
import { SUPPORTED_FORMATS } from './ingest/formats.js';
import { UploadSchema } from './uploads.presenters.js';

export const UploadIdParams = Type.Object({ id: Id('Upload id') });

export const UploadEnvelope = Type.Object({ success: Type.Boolean(), data: UploadSchema });
export const UploadListEnvelope = ListEnvelope(UploadSchema);

/**
 * THE file-status filter of the vault (file list and select-all-ids): the spec's values plus
 * `processing`. Its SQL is uploads.repository's fileStatusCondition.
 */
export const FILE_STATUS_FILTERS = ['active', 'inactive', 'selected', 'error', 'deleted', 'excluded', 'processing'] as const;
export type FileStatusFilter = (typeof FILE_STATUS_FILTERS)[number];

export const FileStatusFilterSchema = Type.Enum([...FILE_STATUS_FILTERS], {
  description:
    'File status filter: one status (`processing`: ingestion still running), or `excluded` = every status except selected and deleted. ' +
    'Absent: every status except deleted',
});

export const ListUploadsQuery = Type.Object({
  scope: Type.Optional(Type.Enum(['personal', 'instance', 'account'], { description: 'Only files of this scope' })),
  institution: Type.Optional(Id('Institution whose files are listed (you must be a member); defaults to your current institution')),
  collection: Type.Optional(
    Type.Union([Type.Literal('root'), Id('Collection id')], { description: 'A collection id: files directly in it; `root`: files at the vault root (in no collection)' }),
  ),
  status: Type.Optional(FileStatusFilterSchema),
  fileNameSearch: Type.Optional(Type.String({ maxLength: 500, description: 'Case-insensitive substring of originalname (% and _ are literal, spaces included; a blank one is no filter), read as names are stored: NFC, a run of whitespace as one space' })),
  ...PageFields,
});

export const PatchUploadBody = Type.Object({
  file_title: Type.Optional(Type.String({ maxLength: 500 })),
  status: Type.Optional(
    Type.Enum(['active', 'inactive', 'selected'], { description: 'Only between these three, and only once ingestion has succeeded' }),
  ),
  collection: Type.Optional(
    Type.Unsafe<string | null>({ type: ['string', 'null'], pattern: UUID_PATTERN, description: 'A visible collection of the same scope and place as the file; null: the vault root' }),
  ),
  is_private: Type.Optional(Type.Boolean({ description: 'Only the owner may change it' })),
  confidential: Type.Optional(Type.Boolean()),
});

/**
 * The multipart form, for the documentation (the route reads the stream itself: fields arrive as
 * strings, booleans as "true"/"false").
 */
export const UploadForm = Type.Object({
  file: Type.Optional(Type.Unsafe<unknown>({ type: 'string', format: 'binary', description: `The file (one). Supported: ${SUPPORTED_FORMATS.join(', ')}` })),
  scope: Type.Optional(
    Type.String({
      enum: ['personal', 'instance', 'account'],
      description: 'Default: the collection\'s scope when `collection` is given; else `instance` when `institution` is given or you have a current institution; else `personal`',
    }),
  ),
  institution: Type.Optional(Type.String({ description: 'Institution of an instance or account file; default: your current institution. Ignored for personal files' })),
  collection: Type.Optional(Type.String({ description: 'Collection id (a visible collection of the same scope and place); empty or `root`: the vault root' })),
  file_title: Type.Optional(Type.String({ maxLength: 500, description: 'Default: the file name' })),
  is_private: Type.Optional(Type.String({ enum: ['true', 'false'], description: 'Default false' })),
  confidential: Type.Optional(Type.String({ enum: ['true', 'false'], description: 'Default false' })),
});
