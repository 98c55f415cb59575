import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../src/db/client.js';
import { templateBlob } from './template.js';

/**
 * A data directory for a server started as its own process (`src/cli.ts serve`), its database restored
 * from the migrated template: the server then starts in about a second instead of initialising and
 * migrating a fresh PGlite (5 s, and far more on a loaded machine).
 */
export async function preparedDataDir(prefix = 'twin-proc-'): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  const database = await openDatabase({ pgliteDataDir: join(dataDir, 'pgdata'), loadDataDir: await templateBlob() });
  await database.close();
  return dataDir;
}
