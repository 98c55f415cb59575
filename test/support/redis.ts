import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createConnection } from 'node:net';
import { freePort } from '../../bench/support.js';

/** Whether a redis-server binary is installed (.ci/run installs it; CI=true makes its absence a failure). */
export function redisServerInstalled(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

/**
 * The `skip` option of a suite that needs a real redis-server: its reason when none is installed, except in CI
 * (.ci/run installs it), where its absence fails the suite instead; false when it can run.
 */
export function skipWithoutRedis(): string | false {
  return !redisServerInstalled() && process.env.CI !== 'true' ? 'redis-server is not installed (apt-get install -y redis-server)' : false;
}

export interface RedisServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

/** A throw-away redis-server on 127.0.0.1, on a port chosen at run time, without persistence. */
export async function startRedis(): Promise<RedisServer> {
  const port = await freePort();
  const child: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--protected-mode', 'yes'], {
    stdio: 'ignore',
  });
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
    if (await canConnect(port)) break;
    if (Date.now() > deadline) throw new Error('redis-server did not start in 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port }, () => {
      socket.end();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}
