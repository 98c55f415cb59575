import type { FastifyBaseLogger } from 'fastify';
import type { AppConfig } from './config.js';
import type { Database, Db } from './db/client.js';
import type { AuthRuntime } from './modules/identity/auth-context.js';
import type { TokenService } from './modules/identity/tokens.js';
import type { Embedder } from './providers/embeddings/types.js';
import type { ChatModel } from './providers/llm/types.js';
import type { MailSender } from './providers/mail/types.js';
import type { BlobStorage } from './providers/storage/types.js';
import type { InvalidationBus } from './platform/invalidation.js';
import type { SegmentCache } from './modules/search/segments.js';
import type { ScopeCache, UploadRowCache } from './modules/search/scopes.js';
import type { IndexWarmer } from './modules/search/indexing.js';
import type { VectorDrain } from './modules/search/vector-drain.js';
import type { Clock } from './shared/clock.js';
import type { Shutdown } from './platform/shutdown.js';
import type { IdempotencyKeys } from './platform/idempotency.js';

/** The edges of the world: each has a local default and a real implementation chosen by configuration. */
export interface Providers {
  mail: MailSender;
  chatModel: ChatModel;
  embedder: Embedder;
  /** Where uploaded files' bytes live (DATA_DIR/files). */
  storage: BlobStorage;
}

/**
 * Everything a service needs, built once per app in app.ts. Tests replace providers through
 * buildApp's `providers` option.
 */
export interface AppContext {
  config: AppConfig;
  database: Database;
  db: Db;
  clock: Clock;
  tokens: TokenService;
  /** Session auth cache (invalidate through it after every write that changes what it holds) and the activity writer. */
  auth: AuthRuntime;
  log: FastifyBaseLogger;
  providers: Providers;
  /** Change announcements for caches (branding); in-process, replaceable by Redis pub/sub for several nodes. */
  invalidation: InvalidationBus;
  /** In-memory copies of uploads' search indexes, validated by version on every search (search/segments.ts). */
  searchIndex: SegmentCache;
  /** The scope each scope condition read last: a search ranks over it while its own scope statement runs (search/scopes.ts). */
  searchScopes: ScopeCache;
  /** The rows of recent results' files with their row versions: a search takes those its scope statement reported unchanged (search/scopes.ts). */
  searchUploadRows: UploadRowCache;
  /** Moves vectors staged by ingestion into the HNSW index in the background (search/vector-drain.ts). */
  vectorDrain: VectorDrain;
  /** Reads a newly ingested file's index into searchIndex in the background (search/indexing.ts). */
  indexWarmer: IndexWarmer;
  /** The graceful shutdown's steps and signals (platform/shutdown.ts): background work stops on `closing`, model calls on `inFlight` (joined by the provider). */
  shutdown: Shutdown;
  /** Runs requests under their Idempotency-Key and renews the leases of the claims this node's requests hold (platform/idempotency.ts). */
  idempotency: IdempotencyKeys;
}
