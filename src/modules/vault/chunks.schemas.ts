import { Type } from '@fastify/type-provider-typebox';
import { Id, ListEnvelope, PageFields } from '../../shared/schemas.js';

export const MAX_CHUNK_TEXT = 100_000;

export const ChunkSchema = Type.Object(
  {
    _id: Type.String({ description: 'Embedding chunk id' }),
    upload: Type.String({ description: 'Id of the file the chunk belongs to' }),
    index: Type.Number({ description: 'Position of the chunk in the file, from 0' }),
    text: Type.String(),
    tokens: Type.Number({ description: 'Tokens of the text (o200k_base encoding)' }),
  },
  { $id: 'EmbeddingChunk' },
);

export const ChunkEnvelope = Type.Object({ success: Type.Boolean(), data: ChunkSchema });
export const ChunkListEnvelope = ListEnvelope(ChunkSchema);

export const ChunkIdParams = Type.Object({ id: Id('Embedding chunk id') });
export const FileIdParams = Type.Object({ id: Id('File (upload) id') });

export const ChunkListQuery = Type.Object({
  page: PageFields.page,
  pageSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100, description: 'Chunks per page (1 to 1000)' })),
});

const ChunkText = (description: string) => Type.String({ minLength: 1, maxLength: MAX_CHUNK_TEXT, pattern: '\\S', description });

export const UpdateChunkBody = Type.Object({
  sanitizedText: Type.Optional(ChunkText('The new text, typically the preview of the sanitize call (1 to 100000 characters, not blank)')),
  text: Type.Optional(ChunkText('The same as sanitizedText, for a manual edit; give exactly one of the two')),
});

export const SanitizeResponse = Type.Object({
  success: Type.Boolean(),
  sanitizedText: Type.String({ description: 'The cleaned text (a preview: nothing is saved)' }),
  tokensUsed: Type.Number({ description: 'Tokens consumed by the model call (input + output)' }),
  model: Type.String({ description: 'The model that answered' }),
});
