import type { ServerResponse } from 'node:http';
import { drained } from './openai-stub.js';

/** How an endless answer ended: the bytes written, and whether the client hung up (rather than the cap being reached). */
export interface EndlessOutcome {
  sent: number;
  hungUp: boolean;
}

/** What an endless answer writes at most, so that a client that does read it all cannot take the test's memory. */
const CAP = 256 * 1024 * 1024;
const PIECE = ' '.repeat(64 * 1024);

const gone = (res: ServerResponse) => res.destroyed || res.socket === null || res.socket.destroyed;

/**
 * Answers `status` and then a body of spaces that does not end: written as fast as the client takes them
 * (backpressure honoured) until it hangs up (or 256 MiB were written, then the body ends).
 */
export async function sendEndlessBody(res: ServerResponse, status: number, headers: Record<string, string> = {}): Promise<EndlessOutcome> {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  let sent = 0;
  while (sent < CAP && !gone(res)) {
    sent += PIECE.length;
    if (!res.write(PIECE)) await drained(res);
  }
  const hungUp = gone(res);
  if (!hungUp) res.end();
  return { sent, hungUp };
}

/** Writes a status line and then header lines that do not end (never the blank line after them), on the raw socket, until the client hangs up (or 256 MiB). */
export async function sendEndlessHeaders(res: ServerResponse): Promise<EndlessOutcome> {
  const socket = res.socket!;
  const line = `x-padding: ${'a'.repeat(1000)}\r\n`;
  let sent = 0;
  const write = (text: string) =>
    new Promise<void>((resolve) => {
      sent += text.length;
      if (socket.write(text)) resolve();
      else {
        const done = () => {
          socket.off('drain', done);
          socket.off('close', done);
          resolve();
        };
        socket.once('drain', done);
        socket.once('close', done);
      }
    });
  await write('HTTP/1.1 200 OK\r\n');
  while (sent < CAP && !socket.destroyed) await write(line.repeat(64));
  const hungUp = socket.destroyed;
  if (!hungUp) socket.destroy();
  return { sent, hungUp };
}
