import { mkdirSync } from 'node:fs';
import { lockDataDir } from './lock.js';
import { RemotePGlite } from './pglite-remote.js';

export interface EarlyPglite {
  dataDir: string;
  pglite: Promise<RemotePGlite>;
  releaseLock: () => void;
}

/**
 * Starts the embedded database's worker thread before the app's modules are loaded, so that PGlite
 * loads and opens on the other core while this thread loads and compiles the app (start-up time:
 * the profile of a start showed the main thread idle ~2 s waiting for the database to open). Only
 * light modules here: this runs before everything else. Undefined when the server will not use an
 * embedded database in a worker (DATABASE_URL, or PGLITE_WORKER=false).
 */
export function startEmbeddedEarly(config: { databaseUrl?: string; dataDir: string; pgliteWorker?: boolean }): EarlyPglite | undefined {
  if (config.databaseUrl || !config.pgliteWorker) return undefined;
  const dataDir = `${config.dataDir}/pgdata`; // as databaseOptionsFor places it
  mkdirSync(dataDir, { recursive: true });
  const releaseLock = lockDataDir(dataDir);
  const pglite = RemotePGlite.create({ dataDir });
  pglite.catch(() => releaseLock());
  return { dataDir, pglite, releaseLock };
}
