import { runCli } from '../../src/cli.js';

/** The environment the CLI tests run `src/cli.ts` in, on `dataDir` (test mode, silent, fixed secrets). */
export const cliEnv = (dataDir: string) => ({
  NODE_ENV: 'test',
  DATA_DIR: dataDir,
  LOG_LEVEL: 'silent',
  JWT_SECRET: 'cli-secret-cli-secret-cli-secret-0123456789',
  ENCRYPTION_KEY: 'cli-key-cli-key-cli-key-cli-key-0123456789',
});

/** `npm run cli -- <argv>` in this process, with `env`: its exit code and what it printed, one line each. */
export async function runCliCaptured(env: Record<string, string>, argv: string[]): Promise<{ code: number; output: string }> {
  const lines: string[] = [];
  const code = await runCli(argv, env, (l) => lines.push(l));
  return { code, output: lines.join('\n') };
}
