// `npm run build`: the server as JavaScript in dist/, in two forms.
// 1. One .js file per .ts file of src/ (esbuild strips the types; the sources are isolatedModules, so no
//    file needs another to be transpiled), plus the SQL migrations. The PGlite worker thread and the
//    ingestion sandbox process start from these files.
// 2. dist/bundle/, what `npm start` runs (dist/bundle/cli.js): the server and most of its dependencies
//    in a few files (esbuild with code splitting; the entry chunk is small, so cli.ts starts the PGlite
//    worker before the server's chunk loads). Node 20 has no module compile cache, and resolving, reading
//    and compiling the ~1,800 files the server imports was most of its start-up (bench/RESULTS.md).
//    In the bundle, each source file's `import.meta.url` is the URL of its file-per-file twin of (1),
//    so the files it locates next to itself (the worker, the sandbox, the migrations) are found as in (1).
//    External: packages with native code or WASM, packages that read files next to their own code
//    (swagger-ui's assets, socket.io's client, swagger's package.json), and the ones loaded only when
//    configured.
// dist/ is overwritten in place, not emptied first: a server already running from it may still fork
// its ingestion sandbox or start its database worker from these files.
import { build } from 'esbuild';
import { cpSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

const src = 'src';
const out = 'dist';
const sources = (dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [path] : [];
  });

const EXTERNAL = [
  // native code, WASM and files next to their own code
  '@electric-sql/pglite',
  '@electric-sql/pglite-pgvector',
  '@node-rs/argon2',
  'onnxruntime-node',
  '@huggingface/transformers',
  '@fastify/swagger',
  '@fastify/swagger-ui',
  'socket.io',
  'pino',
  'esbuild',
  // loaded only when configured (DATABASE_URL, REDIS_URL) or only in the ingestion sandbox
  'pg',
  'ioredis',
  '@socket.io/redis-adapter',
  'unpdf',
  'mammoth',
  'html-to-text',
  // a large table loaded on first use
  'gpt-tokenizer',
];

const common = { format: 'esm', platform: 'node', target: 'node20', sourcemap: true, logLevel: 'warning' };

const started = performance.now();
await build({ ...common, entryPoints: sources(src), outdir: out, outbase: src });
cpSync(join(src, 'db', 'migrations'), join(out, 'db', 'migrations'), { recursive: true });

const srcRoot = resolve(src);
/** `import.meta.url` of a source file → the URL of its twin in dist/, relative to the bundle's files (dist/bundle/) */
const twinUrls = {
  name: 'twin-import-meta-url',
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, (args) => {
      const rel = relative(srcRoot, args.path);
      // the entry keeps its own URL: cli.ts compares it with the script node was started on
      if (rel.startsWith('..') || rel === 'cli.ts') return undefined;
      const twin = `../${rel.split('\\').join('/').replace(/\.ts$/, '.js')}`;
      const contents = readFileSync(args.path, 'utf8').replaceAll('import.meta.url', `new URL(${JSON.stringify(twin)}, import.meta.url).href`);
      return { contents, loader: 'ts' };
    });
  },
};
const bundleDir = join(out, 'bundle');
const bundle = await build({
  ...common,
  entryPoints: [join(src, 'cli.ts')],
  metafile: true,
  outdir: bundleDir,
  bundle: true,
  splitting: true,
  external: EXTERNAL.flatMap((p) => [p, `${p}/*`]),
  plugins: [twinUrls],
  // the CommonJS dependencies in the bundle require Node's built-ins through this
  banner: { js: "import { createRequire as __twinCreateRequire } from 'node:module'; const require = __twinCreateRequire(import.meta.url);" },
});
// chunks of earlier builds (hashed names) go once they are an hour old: a server started from one of
// them before this build may still import its lazily loaded chunks for a while (the metafile lists the
// source maps too)
const current = new Set(Object.keys(bundle.metafile.outputs).map((path) => resolve(path)));
for (const name of readdirSync(bundleDir)) {
  const path = resolve(bundleDir, name);
  if (!current.has(path) && Date.now() - statSync(path).mtimeMs > 3_600_000) rmSync(path);
}
console.log(`built ${out}/ in ${Math.round(performance.now() - started)} ms`);
