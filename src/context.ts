import type { FastifyBaseLogger } from 'fastify';
import type { AppConfig } from './config.js';
import type { Database, Db } from './db/client.js';
import type { TokenService } from './modules/identity/tokens.js';
import type { Clock } from './shared/clock.js';

/**
 * Everything a service needs, built once per app in app.ts. Providers (mail, models, storage) are
 * added by the modules that own them; tests replace them through buildApp's options.
 */
export interface AppContext {
  config: AppConfig;
  database: Database;
  db: Db;
  clock: Clock;
  tokens: TokenService;
  log: FastifyBaseLogger;
}
