/**
 * Where start-up time goes: the time to import each heavy module the server loads at start, in a
 * fresh process each (run: npx tsx bench/startup-imports.ts). Modules imported by the app anyway are
 * shared, so the figures overlap; they rank the candidates for lazy loading.
 */
import { spawnSync } from 'node:child_process';

const modules = ['fastify', '@fastify/swagger', '@fastify/swagger-ui', 'ajv', 'drizzle-orm/pg-core', '@electric-sql/pglite', 'pg', 'openai', 'nodemailer', 'mammoth', 'html-to-text', 'unpdf', 'gpt-tokenizer', 'prom-client', './src/app.ts'];
for (const m of modules) {
  const code = `const t = performance.now(); await import(${JSON.stringify(m.startsWith('.') ? new URL(m, `file://${process.cwd()}/`).href : m)}); console.log((performance.now() - t).toFixed(0));`;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { encoding: 'utf8' });
  console.log(`${m.padEnd(24)} ${r.status === 0 ? `${r.stdout.trim()} ms` : `failed: ${r.stderr.split('\n')[0]}`}`);
}
