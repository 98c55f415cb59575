#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type AppConfig } from './config.js';
import type { Database } from './db/client.js';
import { startEmbeddedEarly } from './db/early.js';

// The app's modules are imported by the command that needs them: `serve` starts the embedded
// database's worker first, so that it opens while they load (start-up time).

const USAGE = `Usage: npm run cli -- <command> [options]

Commands:
  serve                                   start the HTTP server (what \`npm start\` runs)
  migrate                                 apply database migrations and exit
  create-admin --email E --password P     create a superadmin (or promote that user and reset the password)
  seed-demo                               create a demo account, two institutions, admins, users, assistants and course files; prints the logins
  reembed                                 re-embed every chunk with the configured embedder (after changing it)
  regraph                                 rebuild the knowledge graph and search statistics of every indexed file

Configuration comes from the environment (see README).`;

async function withDatabase<T>(config: AppConfig, fn: (db: Database) => Promise<T>): Promise<T> {
  const { databaseOptionsFor, openDatabase } = await import('./db/client.js');
  const database = await openDatabase(databaseOptionsFor(config));
  try {
    await database.migrate();
    return await fn(database);
  } finally {
    await database.close();
  }
}

export async function runCli(argv: string[], env: NodeJS.ProcessEnv = process.env, out: (line: string) => void = console.log): Promise<number> {
  const [command, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: { email: { type: 'string' }, password: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    allowPositionals: false,
    strict: true,
  });
  if (!command || values.help || command === 'help') {
    out(USAGE);
    return command ? 0 : 1;
  }
  const config = loadConfig(env);
  switch (command) {
    case 'serve': {
      const early = startEmbeddedEarly(config);
      const { serve } = await import('./server.js');
      await serve(config, early);
      return -1; // keeps running
    }
    case 'migrate':
      await withDatabase(config, async () => undefined);
      out('migrations applied');
      return 0;
    case 'create-admin': {
      const { email, password } = values;
      if (!email || !/^[^@\s]+@[^@\s]+$/.test(email)) throw new UsageError('create-admin needs --email with an e-mail address');
      if (!password || password.length < 8) throw new UsageError('create-admin needs --password with at least 8 characters');
      const { createSuperadmin } = await import('./modules/tenancy/bootstrap.js');
      const result = await withDatabase(config, (db) => createSuperadmin(db.db, email, password));
      out(result.created ? `superadmin ${email} created (id ${result.id})` : `existing user ${email} promoted to superadmin, password reset (id ${result.id})`);
      return 0;
    }
    case 'seed-demo': {
      const { seedDemo } = await import('./modules/tenancy/seed-demo.js');
      const { createBlobStorage } = await import('./providers/storage/index.js');
      const demo = await withDatabase(config, (db) => seedDemo(db.db, createBlobStorage(config)));
      out(`demo account "${demo.account.name}" (${demo.account.id})`);
      for (const inst of demo.institutions) {
        out(`  institution "${inst.name}" (${inst.id}) publicId ${inst.publicId} ltiContextId ${inst.ltiContextId}`);
      }
      for (const a of demo.assistants) out(`  assistant "${a.name}" (${a.id}) in ${a.institution}`);
      out(`  ${demo.files.length} course files queued for ingestion (indexed by the server's workers once it starts)`);
      out('logins (e-mail / password):');
      for (const login of demo.logins) out(`  ${login.role.padEnd(13)} ${login.email} / ${login.password}`);
      return 0;
    }
    case 'regraph': {
      const { regraphAll } = await import('./modules/search/regraph.js');
      await withDatabase(config, async (database) => {
        out('rebuilding the knowledge graph of every indexed file...');
        let last = 0;
        const r = await regraphAll(database.db, (done, total) => {
          if (done === total || performance.now() - last > 2000) {
            last = performance.now();
            out(`  ${done}/${total} files`);
          }
        });
        out(`done: ${r.uploads} files, ${r.chunks} chunks in ${(r.ms / 1000).toFixed(1)} s`);
      });
      return 0;
    }
    case 'reembed': {
      const { reembedFromCli } = await import('./modules/vault/ingest/reembed-cli.js');
      await withDatabase(config, (database) => reembedFromCli(config, database, out));
      return 0;
    }
    default:
      throw new UsageError(`Unknown command "${command}"\n\n${USAGE}`);
  }
}

class UsageError extends Error {}

const isMain = process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (isMain) {
  runCli(process.argv.slice(2)).then(
    (code) => {
      if (code >= 0) process.exit(code);
    },
    (err: unknown) => {
      if (err instanceof ConfigError || err instanceof UsageError) console.error(err.message);
      else console.error(err);
      process.exit(1);
    },
  );
}
