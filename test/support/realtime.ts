import type { AddressInfo } from 'node:net';
import { io as connect, type Socket as ClientSocket, type ManagerOptions, type SocketOptions } from 'socket.io-client';
import { openDatabase, type Database } from '../../src/db/client.js';
import type { OpenAiStub } from './openai-stub.js';
import { templateBlob } from './template.js';

/** A RECEIVE_STREAM event as a client receives it (contract §6). */
import type { StreamChunk as StreamEvent } from '../../src/modules/realtime/gateway.js';
export type { StreamEvent };

/** The variables of an app whose model provider is the local OpenAI-wire stub, with generous rate limits; `extra` overrides. */
export function stubModelEnv(stub: OpenAiStub, extra: Record<string, string> = {}): Record<string, string> {
  return {
    LOGIN_RATE_LIMIT_PER_EMAIL: '1000',
    LOGIN_RATE_LIMIT_PER_IP: '1000',
    QANDA_RATE_LIMIT_PER_MINUTE: '1000',
    LLM_PROVIDER: 'openai-compatible',
    LLM_BASE_URL: stub.baseUrl,
    LLM_MODEL: 'stub-chat',
    LLM_MAX_RETRIES: '0',
    ...extra,
  };
}

/** The embedded database restored from the migrated template, in its worker thread as in production (PGLITE_WORKER's default outside tests). */
export async function workerDatabase(): Promise<Database> {
  return openDatabase({ pgliteDataDir: 'memory://', loadDataDir: await templateBlob(), pgliteWorker: true });
}

/** Listens on 127.0.0.1, on a port chosen at run time; the base URL. */
export async function listenLocally(app: { listen(o: { port: number; host: string }): Promise<unknown>; server: { address(): unknown } }): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** The Socket.IO clients a test opens (websocket, no reconnection), all closed by `closeAll` in its `after`. */
export class ClientSockets {
  private readonly opened: ClientSocket[] = [];

  /** A client of `base` with `auth: {token}`, once connected; rejects with the server's connect_error. */
  async open(base: string, token: string): Promise<ClientSocket> {
    return this.connect(base, { auth: { token } });
  }

  /** The same with any handshake options (no token, a token in the query...). */
  async connect(base: string, options: Partial<ManagerOptions & SocketOptions>): Promise<ClientSocket> {
    const socket = this.unconnected(base, options);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', (err) => reject(err));
    });
    return socket;
  }

  /** A client not yet connected (its connect and connect_error are the test's). */
  unconnected(base: string, options: Partial<ManagerOptions & SocketOptions>): ClientSocket {
    const socket = connect(base, { transports: ['websocket'], reconnection: false, ...options });
    this.opened.push(socket);
    return socket;
  }

  closeAll(): void {
    for (const socket of this.opened) socket.disconnect();
  }
}

/** How a socket ends: the SESSION_ENDED message the server sent before closing it (if any) and the disconnect reason. */
export function endOf(socket: ClientSocket): Promise<{ message?: string; reason: string }> {
  return new Promise((resolve) => {
    let message: string | undefined;
    socket.once('SESSION_ENDED', (e: { message: string }) => (message = e.message));
    socket.once('disconnect', (reason) => resolve({ message, reason }));
  });
}

/** The RECEIVE_STREAM events a socket gets: `events` as they come, `done` once the last one (done: true) is in. */
export function streamOn(socket: ClientSocket): { events: StreamEvent[]; done: Promise<StreamEvent[]> } {
  const events: StreamEvent[] = [];
  const done = new Promise<StreamEvent[]>((resolve) => {
    const on = (e: StreamEvent) => {
      events.push(e);
      if (e.done) {
        socket.off('RECEIVE_STREAM', on);
        resolve(events);
      }
    };
    socket.on('RECEIVE_STREAM', on);
  });
  return { events, done };
}

/** Resolves once `ready()` holds, polled every few milliseconds; fails with `what` after `timeoutMs` (not a timing assertion: a bound on a hang). */
export async function waitFor(ready: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

