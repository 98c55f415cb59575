// `npm run build`: the server as plain JavaScript in dist/, one .js file per .ts file of src/ (esbuild
// strips the types; the sources are isolatedModules, so no file needs another to be transpiled),
// plus the SQL migrations. Running dist/cli.js skips tsx's transpiling loader, which is most of the
// start-up time from sources (bench/RESULTS.md). Type checking stays `npm run typecheck`.
// dist/ is overwritten in place, not emptied first: a server already running from it may still fork
// its ingestion sandbox or start its database worker from these files.
import { build } from 'esbuild';
import { cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const src = 'src';
const out = 'dist';
const sources = (dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [path] : [];
  });

const started = performance.now();
await build({
  entryPoints: sources(src),
  outdir: out,
  outbase: src,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  logLevel: 'warning',
});
cpSync(join(src, 'db', 'migrations'), join(out, 'db', 'migrations'), { recursive: true });
console.log(`built ${out}/ in ${Math.round(performance.now() - started)} ms`);
