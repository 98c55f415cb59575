#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type AppConfig } from './config.js';
import { endpointOf } from './shared/endpoint.js';
import { StartupError } from './shared/errors.js';
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
  sweep-files [--dry-run]                 remove stored files no upload references, written over an hour ago; prints them, their count and bytes

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

/** The options, with parseArgs' own errors (missing value, unknown option, stray argument) turned into usage errors. */
function parseOptions(args: string[]) {
  try {
    return parseArgs({
      args,
      options: { email: { type: 'string' }, password: { type: 'string' }, 'dry-run': { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      allowPositionals: false,
      strict: true,
    }).values;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_')) throw new UsageError((err as Error).message);
    throw err;
  }
}

export async function runCli(argv: string[], env: NodeJS.ProcessEnv = process.env, out: (line: string) => void = console.log): Promise<number> {
  const [command, ...rest] = argv;
  if (command === 'help' || command === '--help' || command === '-h') {
    out(USAGE);
    return 0;
  }
  const values = parseOptions(rest);
  if (!command || values.help) {
    out(USAGE);
    return command ? 0 : 1;
  }
  if (values['dry-run'] && command !== 'sweep-files') throw new UsageError('--dry-run is an option of sweep-files only');
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
      // its logins have passwords printed in this repository: never on a production deployment
      if (config.nodeEnv === 'production') throw new UsageError('seed-demo creates logins whose passwords are public (they are in the source): refused with NODE_ENV=production');
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
    case 'sweep-files': {
      const dryRun = values['dry-run'] === true;
      const { ORPHAN_FILE_GRACE_MS, sweepOrphanFiles } = await import('./modules/vault/orphan-files.js');
      const { createBlobStorage } = await import('./providers/storage/index.js');
      const r = await withDatabase(config, (database) => {
        out(`${dryRun ? 'dry run: looking for' : 'removing'} stored files no upload references, last written over ${ORPHAN_FILE_GRACE_MS / 60_000} minutes ago...`);
        return sweepOrphanFiles(database.db, createBlobStorage(config), {
          dryRun,
          onOrphan: (file, outcome, err) => {
            const what = `${file.key} (${file.size} bytes, last written ${file.modifiedAt.toISOString()}${file.partial ? ', an unfinished upload' : ''})`;
            if (outcome === 'failed') out(`  could not remove ${what}: ${err instanceof Error ? err.message : String(err)}`);
            else out(`  ${outcome === 'kept' ? 'would remove' : 'removed'} ${what}`);
          },
        });
      });
      if (r.refused) {
        out(`refused: ${r.refused}`);
        return 1;
      }
      const files = (n: number) => `${n} file${n === 1 ? '' : 's'}`;
      if (dryRun) out(`dry run: ${files(r.orphans)} (${r.orphanBytes} bytes) of ${r.listed} stored would be removed; nothing was removed`);
      else out(`removed ${files(r.removed)} (${r.removedBytes} bytes) of ${r.listed} stored${r.failed > 0 ? `; ${files(r.failed)} could not be removed` : ''}`);
      return r.failed > 0 ? 1 : 0;
    }
    case 'reembed': {
      const { reembedFromCli } = await import('./modules/vault/ingest/reembed-cli.js');
      await withDatabase(config, (database) => reembedFromCli(config, database, out));
      return 0;
    }
    default:
      throw new UsageError(`Unknown command "${command}"`);
  }
}

/** A wrong command line: its message and the usage are printed. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** What Node's socket and DNS errors carry. */
type SystemError = Error & { code?: unknown; syscall?: unknown; address?: unknown; port?: unknown; hostname?: unknown };

const LISTEN_REASONS: Record<string, string> = {
  EADDRINUSE: 'the address is in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'the address is not one of this machine\'s',
};

/**
 * The one-line message for a failure the operator can act on (a wrong command line or configuration, a
 * busy port, a database or Redis out of reach, ...), or undefined for one that is truly unexpected, whose
 * stack is then printed. Names what failed by the variable that configures it, never with its credentials.
 */
export function failureMessage(err: unknown, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (err instanceof UsageError) return `${err.message}\n\n${USAGE}`;
  if (err instanceof ConfigError || err instanceof StartupError) return err.message;
  if (!(err instanceof Error)) return undefined;

  // several addresses tried (a name with IPv4 and IPv6 addresses): the first one's details
  let e = err as SystemError;
  if (err instanceof AggregateError && err.errors[0] instanceof Error) e = err.errors[0] as SystemError;
  const code = typeof e.code === 'string' ? e.code : undefined;
  const syscall = typeof e.syscall === 'string' ? e.syscall : undefined;
  const database = endpointOf(env.DATABASE_URL?.trim(), 5432);
  const redis = endpointOf(env.REDIS_URL?.trim(), 6379);

  // a PostgreSQL server that answered but refused (wrong password, no such database)
  if (database && code && /^(28...|3D000)$/.test(code) && 'severity' in e) {
    return `The database at DATABASE_URL ${database.host}:${database.port} refused the connection: ${e.message} (${code})`;
  }
  if (!code || !syscall) return undefined;
  if (syscall === 'listen') {
    const where = `${String(e.address ?? env.HOST ?? '')}:${String(e.port ?? env.PORT ?? '')}`;
    return `Cannot listen on ${where} (HOST, PORT): ${LISTEN_REASONS[code] ?? e.message} (${code})`;
  }
  if (syscall === 'getaddrinfo' && typeof e.hostname === 'string') {
    const name = e.hostname;
    const what = database?.host === name ? 'Cannot reach the database at DATABASE_URL' : redis?.host === name ? 'Cannot reach Redis at REDIS_URL' : env.HOST?.trim() === name ? 'Cannot listen on HOST' : 'Cannot reach';
    return `${what} ${name}: the host name does not resolve (${code})`;
  }
  if (syscall === 'connect' && typeof e.port === 'number') {
    const where = `${String(e.address)}:${e.port}`;
    if (database?.port === e.port) return `Cannot reach the database at DATABASE_URL ${database.host}:${database.port} (${code})`;
    if (redis?.port === e.port) return `Cannot reach Redis at REDIS_URL ${redis.host}:${redis.port} (${code})`;
    return `Cannot connect to ${where} (${code})`;
  }
  return undefined;
}

const isMain = process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (isMain) {
  runCli(process.argv.slice(2)).then(
    (code) => {
      if (code >= 0) process.exit(code);
    },
    (err: unknown) => {
      console.error(failureMessage(err) ?? err);
      process.exit(1);
    },
  );
}
