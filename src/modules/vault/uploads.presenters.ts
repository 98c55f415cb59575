import { Type } from '@fastify/type-provider-typebox';
import { DateTime, Nullable } from '../../shared/schemas.js';
import type { UploadRow } from './uploads.repository.js';

/** An upload (vault file): the spec's fields spelled as the spec spells them, then ours. */
export const UploadSchema = Type.Object(
  {
    _id: Type.String(),
    originalname: Type.String({ description: 'Original file name' }),
    filesize: Type.Number({ description: 'Bytes' }),
    mimetype: Type.String({ description: 'Media type, derived from the detected format' }),
    file_title: Type.String(),
    institution: Type.String({ description: 'Institution id; "" (the empty string) for personal files, which belong to no institution' }),
    is_private: Type.Boolean({ description: 'Only the owner sees the file, whatever its scope' }),
    confidential: Type.Boolean({ description: 'Content search shows a placeholder instead of its text (institution and account files; the owner of a personal file sees its own text)' }),
    tokens_used: Type.Number({ description: 'Tokens spent by sanitize calls on its chunks' }),
    scope: Type.String({ description: 'personal | instance | account' }),
    collection: Nullable(Type.String({ description: 'Collection id; null at the vault root' })),
    status: Type.String({ description: 'processing (ingestion running) | active | inactive | selected | error | deleted' }),
    error_message: Nullable(Type.String({ description: 'Why ingestion failed (status error)' })),
    chunkCount: Type.Number({ description: 'Indexed chunks' }),
    progress: Type.Number({ description: 'Ingestion progress 0..100' }),
    stage: Type.String({ description: 'Ingestion stage: queued, loading, extracting, chunking, embedding, indexing, retrying, done, failed, deleted' }),
    pages: Nullable(Type.Number({ description: 'Page count (PDF)' })),
    owner: Type.String({ description: 'User id of the uploader' }),
    created: DateTime(),
    updated: DateTime(),
  },
  { $id: 'Upload' },
);

export function presentUpload(u: UploadRow) {
  return {
    _id: u.id,
    originalname: u.originalname,
    filesize: Number(u.filesize),
    mimetype: u.mimetype,
    file_title: u.fileTitle,
    institution: u.institutionId ?? '',
    is_private: u.isPrivate,
    confidential: u.confidential,
    tokens_used: Number(u.tokensUsed),
    scope: u.scope,
    collection: u.collectionId,
    status: u.status,
    error_message: u.errorMessage,
    chunkCount: u.chunkCount,
    progress: u.progress,
    stage: u.stage,
    pages: u.pages,
    owner: u.ownerUserId,
    created: u.createdAt.toISOString(),
    updated: u.updatedAt.toISOString(),
  };
}
