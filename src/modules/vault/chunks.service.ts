import type { AppContext } from '../../context.js';
import { buildSanitizeRequest, sanitizePieces } from '../../providers/llm/index.js';
import { UpstreamError } from '../../providers/llm/types.js';
import { loadEncoding } from '../../providers/llm/tokens.js';
import { badField, conflict, notFound, upstreamFailed } from '../../shared/errors.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import * as repo from './chunks.repository.js';
import type { ChunkRow, ChunkUpload } from './chunks.repository.js';
import { countTokens } from './ingest/chunker.js';
import { EMBEDDER_CHANGED_MESSAGE, embedderMatches } from './ingest/pipeline.js';
import { packVector, type PackedVector } from '../search/vectors.js';
import { visibleText } from './text.js';
import { assertModify } from './vault.policy.js';
import { extractEntities } from '../search/graph.js';
import { replaceChunkText } from '../search/search.repository.js';

export function presentChunk(c: ChunkRow) {
  return { _id: c.id, upload: c.uploadId, index: c.index, text: c.text, tokens: c.tokens };
}

/** Whatever a provider threw after its own retries: the HTTP answer is a 502 without provider internals. */
function isUpstreamFailure(err: unknown): boolean {
  return err instanceof UpstreamError || (err instanceof Error && err.name === 'UpstreamError');
}

/**
 * Embedding chunks of vault files: read, edit (re-embed and re-index) and the AI sanitize preview.
 * A chunk is exactly as visible as its file (vault policy); changing it needs the right to change the file.
 */
export class ChunksService {
  constructor(private readonly ctx: AppContext) {}

  private async visible(auth: AuthContext, chunkId: string): Promise<{ chunk: ChunkRow; upload: ChunkUpload }> {
    const found = await repo.findVisibleChunk(this.ctx.db, auth, chunkId);
    if (!found) throw notFound('Embedding chunk');
    return found;
  }

  async get(auth: AuthContext, chunkId: string) {
    return presentChunk((await this.visible(auth, chunkId)).chunk);
  }

  async listForUpload(auth: AuthContext, uploadId: string, page: number, pageSize: number) {
    if (!(await repo.isUploadVisible(this.ctx.db, auth, uploadId))) throw notFound('File');
    const { offset } = pageWindow({ page, pageSize });
    const { rows, total } = await repo.listChunks(this.ctx.db, uploadId, offset, pageSize);
    return envelope(rows.map(presentChunk), total, page, pageSize);
  }

  /**
   * Replaces the text. The vector is computed first, outside any transaction (a slow provider must not
   * hold row locks); then, in one transaction, the embedder is checked and text, token count, vector and
   * full-text index are written.
   */
  async update(auth: AuthContext, chunkId: string, body: { sanitizedText?: string; text?: string }) {
    if (body.sanitizedText !== undefined && body.text !== undefined) throw badField('text', 'Give either sanitizedText or text, not both');
    const text = body.sanitizedText ?? body.text;
    if (text === undefined) throw badField('sanitizedText', 'sanitizedText (or text) is required');
    // the schema's pattern refuses whitespace only; invisible format characters (zero-width spaces, bidi marks) are blank too
    if (visibleText(text) === '') throw badField(body.sanitizedText !== undefined ? 'sanitizedText' : 'text', 'The text must not be blank');

    const { upload } = await this.visible(auth, chunkId);
    assertModify(auth, upload, 'Only the owner of the file or a vault administrator may change its chunks');

    const embedder = this.ctx.providers.embedder;
    let vector: PackedVector;
    try {
      const [embedded] = await embedder.embed([text]);
      if (!embedded) throw new Error('The embedder returned no vector');
      vector = packVector(embedded, embedder.dimensions);
    } catch (err) {
      if (isUpstreamFailure(err)) {
        this.ctx.log.warn({ err }, 'embedding provider failed while re-embedding a chunk');
        throw upstreamFailed('The embedding provider failed; the chunk was not changed');
      }
      throw err;
    }
    await loadEncoding();
    const tokens = countTokens(text);
    const mentions = extractEntities(text); // knowledge-graph entities follow the edit
    const saved = await this.ctx.db.transaction(async (tx) => {
      // Vectors of two embedders are never mixed: checked here, under a share lock of the embedder
      // state, so that a re-embed (or another node's model) cannot slip in between the check and this
      // vector; edits and ingestions of other tenants hold the same share lock without waiting.
      if (!(await embedderMatches(tx, embedder, this.ctx.clock.now(), { lock: 'share' }))) {
        throw conflict(`The stored vectors come from another embedder (${EMBEDDER_CHANGED_MESSAGE})`);
      }
      return replaceChunkText(tx, chunkId, text, tokens, vector, mentions, this.ctx.clock.now());
    });
    if (!saved) throw notFound('Embedding chunk');
    return presentChunk(saved);
  }

  /**
   * AI clean-up preview of the chunk text with the summary model of the file's institution (its
   * override, else the provider's default; personal files: the default). Only for those who may change
   * the file (the preview is only useful to someone who can save it). Nothing is saved except the token
   * usage, which is added to the file's tokens_used atomically, with its row in upload_token_ledger. A provider failure (UpstreamError)
   * reaches the error handler: 502 UPSTREAM_FAILED.
   */
  async sanitize(auth: AuthContext, chunkId: string) {
    const { chunk, upload } = await this.visible(auth, chunkId);
    assertModify(auth, upload, 'Only the owner of the file or a vault administrator may sanitize its chunks');
    const model = upload.institutionId && upload.summaryModel ? upload.summaryModel : undefined;
    await loadEncoding();
    // A long chunk goes in pieces whose answers fit the completion budget: never summarised nor shortened
    // (spec). An answer the model cut at its length limit fails the whole preview instead of shortening it.
    const out: string[] = [];
    let tokensUsed = 0;
    let modelName = '';
    try {
      for (const piece of sanitizePieces(chunk.text)) {
        const result = await this.ctx.providers.chatModel.complete(buildSanitizeRequest(piece.text, model, piece.tokens));
        tokensUsed += Math.max(0, Math.round(result.usage.totalTokens));
        modelName = result.model;
        if (result.truncated) throw upstreamFailed('The model stopped at its length limit before the end of the text; nothing was sanitized');
        out.push(result.text.trim() + piece.joiner);
      }
    } finally {
      // what the calls made so far consumed is counted, whether or not the preview is complete
      if (tokensUsed > 0) await repo.addTokensUsed(this.ctx.db, { uploadId: upload.id, chunkId: chunk.id, userId: auth.userId, tokens: tokensUsed, kind: 'sanitize', model: modelName });
    }
    return { success: true, sanitizedText: out.join(''), tokensUsed, model: modelName };
  }
}
