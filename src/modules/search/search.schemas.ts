import { Type, type Static } from '@fastify/type-provider-typebox';
import { UploadSchema } from '../vault/uploads.presenters.js';

export const MAX_QUERY_CHARS = 500;

export const SearchContentBody = Type.Object({
  query: Type.String({
    maxLength: 4 * MAX_QUERY_CHARS,
    description:
      `1 to ${MAX_QUERY_CHARS} characters after trimming (a longer or blank query is a 400). ` +
      `maxLength bounds the string as sent, surrounding whitespace included (${4 * MAX_QUERY_CHARS}); the bound that matters is the ${MAX_QUERY_CHARS} after trimming`,
  }),
  selectedUploadIds: Type.Optional(
    Type.Array(Type.Unknown(), {
      maxItems: 5000,
      description:
        'Upload ids (strings) to search within, at most 5000 (more: 400). Intersected with the eligible scope: ids of files you cannot search, and malformed entries, are dropped silently (never a 400 or 403).',
    }),
  ),
  minScore: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: 'Minimum dense (cosine) score of `rag` results; ignored for `kag` and `fused` results' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 10, description: 'Results to return, 1 to 100 (default 10)' })),
  method: Type.Optional(
    Type.Union([Type.Literal('fused'), Type.Literal('dense'), Type.Literal('lexical'), Type.Literal('kag')], {
      description: 'Evaluation switch, superadmins only (others: 403): run one retrieval method alone. Default `fused` (all three).',
    }),
  ),
});
export type SearchContentBody = Static<typeof SearchContentBody>;

export const SearchResultSchema = Type.Object({
  _id: Type.String({ description: 'Embedding chunk id (GET /api/user/embedding/{id})' }),
  chunkId: Type.String(),
  chunkIndex: Type.Integer(),
  uploadId: Type.String(),
  snippet: Type.String({ description: 'About 200 characters around the densest cluster of query terms, cut on word boundaries (never over 400); exactly `[confidential]` for confidential institution and account files (a personal file\'s owner sees its text)' }),
  score: Type.Number({ minimum: 0, maximum: 1, description: 'Fused relevance in 0..1 (CombSUM anchored on BM25, weighted by evidence; see the route description)' }),
  source: Type.Union([Type.Literal('rag'), Type.Literal('kag'), Type.Literal('fused')], {
    description: '`rag`: dense and/or lexical retrieval; `kag`: knowledge graph; `fused`: found by both',
  }),
  denseScore: Type.Union([Type.Number(), Type.Null()], { description: 'Cosine similarity of the chunk to the query (what minScore filters)' }),
  scores: Type.Object(
    { dense: Type.Optional(Type.Number()), lexical: Type.Optional(Type.Number()), kag: Type.Optional(Type.Number()) },
    { description: 'Normalised score (0..1) of each method that found the chunk' },
  ),
  upload: UploadSchema,
});

export const SearchContentResponse = Type.Object({
  success: Type.Literal(true),
  query: Type.String({ description: 'The query as sent' }),
  results: Type.Array(SearchResultSchema),
  totalScanned: Type.Integer({ description: 'Raw candidates of all methods (distinct chunks) before the minScore filter' }),
  uploadCount: Type.Integer({ description: 'Distinct active uploads searched: the eligible scope, intersected with selectedUploadIds when given' }),
  tookMs: Type.Number({ description: 'Server-side milliseconds' }),
});
