import type { FastifyRequest } from 'fastify';
import { Gauge } from 'prom-client';
import type { AppContext } from '../../context.js';
import { authOf, requireAuth, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import type { App } from '../../http/types.js';
import { errorResponses } from '../../shared/schemas.js';
import { countStagedVectors } from './search.repository.js';
import { SearchContentBody, SearchContentResponse } from './search.schemas.js';
import { SearchService } from './search.service.js';

/** Content search (spec: POST /api/user/files/search-content; contract §5). */
export async function searchRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new SearchService(ctx);
  const { config } = ctx;
  // the background move of staged vectors into the HNSW index: from ready until just before the database closes
  app.addHook('onReady', async () => ctx.vectorDrain.start());
  app.addHook('preClose', async () => ctx.vectorDrain.stop());
  // a new file's index read into memory in the background: stopped before the database closes
  app.addHook('preClose', async () => ctx.indexWarmer.stop());
  new Gauge({
    name: 'search_vectors_staged',
    help: 'Chunk vectors written by ingestion and not yet in the HNSW index (searches compare them exactly)',
    registers: [app.metrics],
    async collect() {
      this.set(await countStagedVectors(ctx.db));
    },
  });
  const checkSearch = (request: FastifyRequest) => {
    try {
      service.checkRequest(authOf(request), request.body as SearchContentBody);
      return undefined;
    } catch (err) {
      return err as Error;
    }
  };
  const searchRate = limits(app, { max: config.searchRateLimitPerMinute, timeWindowMs: 60_000, key: (request) => `search-content:${authOf(request).userId}` });

  app.post(
    '/api/user/files/search-content',
    {
      schema: {
        tags: ['search'],
        summary: 'Scored content search over your vault (hybrid RAG + knowledge graph)',
        description:
          'Searches the chunks of the files in use (status active or selected; not inactive) you may search: your personal files, the files of your current institution, and the ' +
          "account-scope files of its account (others' private files never). `selectedUploadIds` narrows that scope; foreign or malformed " +
          'ids in it are dropped silently. Three methods run over the scope: dense (pgvector cosine; HNSW with iterative scan, an exact ' +
          'scan for small scopes), lexical (Okapi BM25, k1 1.2, b 0.75, over the english full-text configuration with stemming, with the ' +
          'statistics of your scope, then RM3 relevance feedback; the feedback pass\'s first 200 chunks are ranked again by Dirichlet query ' +
          'likelihood over counts mixed with those of their 10 nearest chunks among them (document expansion); quoted phrases and ' +
          '-exclusions follow websearch_to_tsquery; misspelt names are corrected by trigram similarity), and the knowledge graph ' +
          '(entities of the query matched exactly then by trigram similarity, their chunks, one hop ' +
          'along the strongest co-occurrence edges with a decay, scored by inverse entity frequency). ' +
          '-exclusions hold for every method: a chunk holding an excluded word or phrase is no result, whichever method found it. ' +
          'Fusion: a CombSUM anchored on BM25 and weighted by evidence. Each list is divided by its best score; BM25 weighs 1, dense and ' +
          'graph each ½ × the share of their top 10 that BM25\'s top 10 confirms (a side retrieving noise earns nothing); without BM25 hits ' +
          'the other sides weigh equally; `score` = Σ w·norm / Σ w, in 0..1. ' +
          '`source`: `rag` (dense and/or lexical), `kag` (graph only) or `fused` (both; found by dense = a cosine of at least half the ' +
          "query's best). " +
          '`minScore` drops `rag` results whose dense cosine ' +
          'is below it and is ignored for `kag` and `fused` results. `totalScanned` counts the distinct candidates before that filter; ' +
          '`uploadCount` the distinct uploads searched. Snippets: about 200 characters around the densest cluster of query terms (never ' +
          'over 400); exactly `[confidential]` for confidential institution and account files, whose text appears in no other field either. ' +
          `Rate limit: ${config.searchRateLimitPerMinute} requests per user per minute (SEARCH_RATE_LIMIT_PER_MINUTE), then 429 with ` +
          'Retry-After; requests refused by validation are not counted. An embedding provider that fails after its retries, or answers ' +
          'with vectors of the wrong number or size, is a 502 UPSTREAM_FAILED.',
        security: SECURED,
        body: SearchContentBody,
        response: { 200: SearchContentResponse, ...errorResponses(400, 401, 403, 429, 502) },
      },
      // malformed ids in it are dropped silently (spec rule 1), those holding a NUL too
      config: { idListsDroppingMalformed: ['selectedUploadIds'] },
      preValidation: requireAuth(ctx),
      // the request's own 400s and 403 first: only requests the service accepts count against the limit
      preHandler: [(request, _reply, done) => done(checkSearch(request)), searchRate],
    },
    async (request) => service.searchContent(authOf(request), request.body),
  );
}
