import { buildApp, type App } from './app.js';
import type { AppConfig } from './config.js';
import type { EarlyPglite } from './db/early.js';

/**
 * Listens and handles SIGTERM/SIGINT: stop accepting (Fastify answers 503 to new requests while
 * closing), let in-flight requests finish, stop workers, close the database — then exit; all within
 * SHUTDOWN_TIMEOUT_MS (platform/shutdown.ts says in which order).
 */
export async function serve(config: AppConfig, early?: EarlyPglite): Promise<App> {
  const started = performance.now();
  const app = await buildApp({ config, early });
  await app.listen({ port: config.port, host: config.host });
  app.log.info({ startupMs: Math.round(performance.now() - started), database: app.ctx.database.kind }, 'server ready');

  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down: draining in-flight requests');
    // platform/shutdown.ts keeps within the budget (requests still running at its end are stopped and answered):
    // this is the last resort if something else hangs
    const budgetMs = app.ctx.shutdown.budgetMs;
    const force = setTimeout(() => {
      app.log.error(`shutdown took longer than SHUTDOWN_TIMEOUT_MS (${budgetMs} ms); exiting`);
      process.exit(1);
    }, budgetMs);
    force.unref();
    app
      .close()
      .then(() => process.exit(0))
      .catch((err) => {
        app.log.error({ err }, 'error during shutdown');
        process.exit(1);
      });
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
  return app;
}
