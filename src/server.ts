import { buildApp, type App } from './app.js';
import type { AppConfig } from './config.js';
import type { EarlyPglite } from './db/early.js';

/**
 * Listens and handles SIGTERM/SIGINT: stop accepting (Fastify answers 503 to new requests while
 * closing), let in-flight requests finish, stop workers, close the database — then exit.
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
    const force = setTimeout(() => {
      app.log.error('shutdown took longer than 25 s; exiting');
      process.exit(1);
    }, 25_000);
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
