import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '../../src/db/client.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const migrationsDir = join(root, 'src', 'db', 'migrations');
const cacheDir = join(root, '.test-cache');

/** The snapshot's name changes whenever a migration changes, so a stale template is never used. */
function templatePath(): string {
  const hash = createHash('sha256');
  const walk = (dir: string) => {
    for (const name of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(dir, name.name);
      if (name.isDirectory()) walk(p);
      else hash.update(name.name).update(readFileSync(p));
    }
  };
  walk(migrationsDir);
  return join(cacheDir, `template-${hash.digest('hex').slice(0, 16)}.tar.gz`);
}

/** Migrates a fresh PGlite once and keeps its dumpDataDir snapshot; later calls reuse it. */
export async function ensureTemplate(): Promise<string> {
  const path = templatePath();
  if (existsSync(path)) return path;
  mkdirSync(cacheDir, { recursive: true });
  const database = await openDatabase({ pgliteDataDir: 'memory://' });
  try {
    await database.migrate();
    const dump = await database.pglite!.dumpDataDir('gzip');
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, Buffer.from(await dump.arrayBuffer()));
    renameSync(tmp, path);
  } finally {
    await database.close();
  }
  return path;
}

/** A Blob of the migrated template, to hand to PGlite's loadDataDir. */
export async function templateBlob(): Promise<Blob> {
  const path = await ensureTemplate();
  return new Blob([readFileSync(path)]);
}
