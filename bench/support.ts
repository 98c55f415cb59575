import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** A free loopback port chosen at run time. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * Node's flags for the server, as `npm start` passes them (package.json; test/server.test.ts checks that they are
 * the same): a young generation of up to 64 MB a semi-space instead of V8's 16. A search at 100k chunks allocates
 * about 1.6 MB; with 16 MB one search in seven or eight was interrupted by a 3–5 ms scavenge, and the objects of the
 * searches in flight that a scavenge found alive were copied and promoted (bench/RESULTS.md, twenty-fourth pass).
 */
export const SERVER_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=64'];

/** Node's arguments for a script: TypeScript through tsx's loader; built JavaScript (dist/) as it is; both with the server's flags. */
export const nodeArgs = (args: string[]): string[] =>
  args.some((a) => a.endsWith('.ts')) ? ['--import', 'tsx', ...SERVER_NODE_FLAGS, ...args] : ['--enable-source-maps', ...SERVER_NODE_FLAGS, ...args];

/**
 * For a benchmark that hosts the app in its own process (bench/search.ts): runs this script again under
 * SERVER_NODE_FLAGS when it was started without them, and exits with its status; returns when they are in force.
 */
export function underServerFlags(): void {
  if (SERVER_NODE_FLAGS.every((flag) => process.execArgv.includes(flag))) return;
  const run = spawnSync(process.execPath, [...process.execArgv, ...SERVER_NODE_FLAGS, ...process.argv.slice(1)], { stdio: 'inherit' });
  process.exit(run.status ?? 1);
}

/** Starts `node [--import tsx] <args>` and resolves once a line matching `ready` appears on stdout. */
export function startProcess(args: string[], env: Record<string, string>, ready: RegExp, timeoutMs = 60_000): Promise<{ child: ChildProcess; ms: number }> {
  const started = performance.now();
  const child = spawn(process.execPath, nodeArgs(args), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready after ${timeoutMs} ms: ${args.join(' ')}`)), timeoutMs);
    let buffer = '';
    const onData = (d: Buffer) => {
      buffer += d.toString();
      if (ready.test(buffer)) {
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        child.stdout?.resume();
        resolve({ child, ms: performance.now() - started });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (d: Buffer) => process.stderr.write(d));
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited with ${code} before ready: ${buffer.slice(-2000)}`));
    });
  });
}

export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

/** Polls a URL until it answers 200 (for servers whose logs are quiet). */
export async function waitForUrl(url: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${url} not ready after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Starts `node [--import tsx] <args>` and resolves once `readyUrl` answers 200. */
export async function startServer(args: string[], env: Record<string, string>, readyUrl: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, nodeArgs(args), { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited with ${code}`))));
  await Promise.race([waitForUrl(readyUrl), exited]);
  return child;
}

/** Runs `node [--import tsx] <args>` to completion; rejects on a non-zero exit. Returns stdout. */
export function runProcess(args: string[], env: Record<string, string>, timeoutMs = 600_000): Promise<string> {
  const child = spawn(process.execPath, nodeArgs(args), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${args.join(' ')} exited with ${code}: ${err.slice(-2000)}`));
    });
  });
}

/** Resident set size of a process in bytes (Linux /proc). */
export function rssOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /VmRSS:\s+(\d+)\s+kB/.exec(status);
  return m ? Number(m[1]) * 1024 : 0;
}

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

export const percentile = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};

/** JSON request against the app; throws with the body on an unexpected status. */
export async function api<T = any>(base: string, method: string, path: string, options: { token?: string; body?: unknown; expect?: number[] } = {}): Promise<T> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...(options.body !== undefined ? { 'content-type': 'application/json' } : {}), ...(options.token ? { authorization: `Bearer ${options.token}` } : {}) },
    body: options.body !== undefined ? JSON.stringify(options.body) : undefined,
  });
  const text = await res.text();
  if (!(options.expect ?? [200, 201]).includes(res.status)) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 500)}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

export interface BenchWorld {
  rootToken: string;
  userToken: string;
  userEmail: string;
  password: string;
  accountId: string;
  institutionId: string;
  publicId: string;
  userId: string;
}

/**
 * What the scenarios need, created through the API as a client would: an account, an institution
 * with credits, a user enrolled in it (logged in), and the superadmin's token.
 */
export async function seedWorld(base: string, admin: { email: string; password: string }): Promise<BenchWorld> {
  const rootToken = (await api(base, 'POST', '/api/auth/login', { body: admin })).accessToken as string;
  const account = (await api(base, 'POST', '/api/admin/account', { token: rootToken, body: { name: `Bench ${Date.now()}` } })).data;
  const institution = (
    await api(base, 'POST', '/api/admin/institution', { token: rootToken, body: { account: account._id, name: 'Bench Institute', ainame: 'Bench', credits: 1_000_000 } })
  ).data;
  const password = 'bench-user-password';
  const userEmail = `bench-user-${Date.now()}@example.com`;
  const user = (
    await api(base, 'POST', '/api/admin/user', {
      token: rootToken,
      body: { email: userEmail, password, fname: 'Bench', lname: 'User', account: account._id, institutions: [{ institution: institution._id, role: 'user' }], credits: 1_000_000 },
    })
  ).data;
  const userToken = (await api(base, 'POST', '/api/auth/login', { body: { email: userEmail, password } })).accessToken as string;
  return { rootToken, userToken, userEmail, password, accountId: account._id, institutionId: institution._id, publicId: institution.publicId, userId: user._id };
}

/** `rows` memory parameters of the user (personal), through the module's write route. */
export async function seedMemoryRows(base: string, token: string, rows = 20): Promise<void> {
  for (let i = 0; i < rows; i++) {
    await api(base, 'POST', '/api/user/memory', { token, body: { key_name: `bench_key_${i}`, key_value: `value ${i}`, key_namespace: 'bench' }, expect: [201] });
  }
}

/** "METHOD /path" of every operation in the app's OpenAPI document (paths in OpenAPI form: /x/{id}). */
export async function operations(base: string): Promise<Set<string>> {
  const doc = (await (await fetch(`${base}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
  const ops = new Set<string>();
  for (const [path, methods] of Object.entries(doc.paths)) for (const m of Object.keys(methods)) ops.add(`${m.toUpperCase()} ${path}`);
  return ops;
}

/** Uploads a file through the API (multipart, as a browser would). Returns the upload record. */
export async function uploadThroughApi(base: string, token: string, name: string, bytes: Uint8Array, type = 'text/plain'): Promise<{ _id: string }> {
  const form = new FormData();
  form.append('file', new Blob([bytes], { type }), name);
  const res = await fetch(`${base}/api/user/files`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: form });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`upload ${name}: ${res.status} ${text.slice(0, 500)}`);
  return JSON.parse(text).data;
}

/** Polls the upload until it leaves `processing`; returns the record. */
export async function waitUntilIngested(base: string, token: string, id: string, timeoutMs = 30 * 60_000): Promise<Record<string, any>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const file = (await api(base, 'GET', `/api/user/files/${id}`, { token })).data;
    if (file.status !== 'processing') return file;
    if (Date.now() > deadline) throw new Error(`upload ${id} still processing after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
