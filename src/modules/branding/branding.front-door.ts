import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { BrandingEntry } from './branding.cache.js';

/** The path of the public branding lookup (branding.routes.ts). */
export const BRANDING_PATH = '/api/agent/branding';
/** A body longer than this is no plain `{"publicId": "…"}`: the route answers it. */
const MAX_BODY_BYTES = 1024;
const PUBLIC_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export interface BrandingFrontDoorOptions {
  /** The cached entry of a publicId (lower-cased), without loading it: BrandingCache.peek. */
  peek(publicId: string): BrandingEntry | undefined;
  /** Whether the server shuts down (the route's 503 is then Fastify's to send). */
  closing: AbortSignal;
  /**
   * The app's logger when it logs each request (at info: Fastify's "incoming request" and "request completed"
   * lines, which the door then writes as Fastify does), else undefined.
   */
  requestLog: { info(fields: object, message: string): void } | undefined;
  /** Whether the client's address comes from forwarding headers (TRUST_PROXY): Fastify's to work out, for its log lines. */
  trustsProxy: boolean;
  /** The headers every answer of the app carries (security headers), and those of a branding answer. */
  headers: Record<string, string>;
  cacheControl: string;
  /** The request id Fastify would give this request (x-request-id honoured, else the next of the process). */
  requestId(req: IncomingMessage): string;
  /** Counts the answer as /metrics counts every answer (method, route, status, seconds). */
  record(status: number, seconds: number): void;
  /** The drain's count of requests in flight (Shutdown.track). */
  track(res: ServerResponse): void;
  /** Whether an If-None-Match header names the ETag (the route's own comparison). */
  matchesEtag(header: string | undefined, etag: string): boolean;
}

/**
 * The branding of a cached digital twin, answered in front of Fastify. POST /api/agent/branding is public,
 * cached and the hottest lookup of the service (a page load of every embedded assistant asks for it); through
 * Fastify's POST pipeline (body parser, validator, hooks, reply) it cost about twice the CPU of a bare GET
 * (bench/RESULTS.md). This door answers the requests whose answer is a cache hit, with the bytes and headers the
 * route sends for it (a test compares the two answer by answer), and hands every other request to Fastify
 * untouched: another method or path, a request while the server shuts down, one with an Origin (CORS is
 * Fastify's), one that is not a single small `application/json` body, a body that is not a plain object with a
 * well-formed publicId or that names `__proto__`/`constructor` (secure-json-parse's refusal is the route's), a
 * publicId the cache does not hold as found (a miss loads it, an unknown one is the route's 404), and every
 * request while the app both logs each request and takes client addresses from forwarding headers (Fastify's
 * work). When the app logs each request, the door writes the two lines Fastify writes. A body read here and
 * handed on is given back to the stream first, so the route reads it as if nothing had happened.
 */
export interface FrontDoor {
  (req: IncomingMessage, res: ServerResponse, next: Handler): void;
  /** Requests this door answered itself (the others went on to Fastify). */
  answered: number;
}

export function brandingFrontDoor(options: BrandingFrontDoorOptions): FrontDoor {
  const hitOf = (chunk: Buffer): (BrandingEntry & { found: true }) | undefined => {
    const text = chunk.toString('utf8');
    if (text.includes('__proto__') || text.includes('constructor')) return undefined;
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return undefined;
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
    const publicId = (body as { publicId?: unknown }).publicId;
    if (typeof publicId !== 'string' || !PUBLIC_ID.test(publicId)) return undefined;
    const entry = options.peek(publicId.toLowerCase());
    return entry?.found ? entry : undefined;
  };

  const log = options.requestLog;
  const answer = (req: IncomingMessage, res: ServerResponse, entry: BrandingEntry & { found: true }, started: bigint) => {
    options.track(res);
    const reqId = options.requestId(req);
    // Fastify's own lines: its request serializer reads these fields of what it is given (fastify/lib/logger-pino.js)
    log?.info({ reqId, req: { method: req.method, url: req.url, headers: req.headers, host: req.headers.host, ip: req.socket.remoteAddress, socket: req.socket } }, 'incoming request');
    const headers: Record<string, string> = { ...options.headers, 'cache-control': options.cacheControl, etag: entry.etag, 'x-request-id': reqId };
    let status = 200;
    if (options.matchesEtag(req.headers['if-none-match'], entry.etag)) {
      status = 304;
      res.writeHead(304, headers).end();
    } else {
      headers['content-type'] = 'application/json; charset=utf-8';
      headers['content-length'] = String(entry.body.length);
      res.writeHead(200, headers).end(entry.body);
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    options.record(status, seconds);
    log?.info({ reqId, res: { statusCode: status }, responseTime: seconds * 1000 }, 'request completed');
  };

  const door: FrontDoor = Object.assign(
    (req: IncomingMessage, res: ServerResponse, next: Handler) => {
      const h = req.headers;
      const length = Number(h['content-length']);
      const type = h['content-type'];
      if (
        req.method !== 'POST' ||
        req.url !== BRANDING_PATH ||
        (log !== undefined && options.trustsProxy) ||
        options.closing.aborted ||
        h.origin !== undefined ||
        h['transfer-encoding'] !== undefined ||
        !(length > 0 && length <= MAX_BODY_BYTES) ||
        (type !== 'application/json' && type?.toLowerCase() !== 'application/json; charset=utf-8')
      ) {
        next(req, res);
        return;
      }
      const started = process.hrtime.bigint();
      // the first chunk decides; a request that ends or fails before it is Fastify's as it stands
      const handOn = () => {
        req.removeListener('data', onData);
        req.removeListener('end', handOn);
        req.removeListener('error', handOn);
        next(req, res);
      };
      const onData = (chunk: Buffer) => {
        req.removeListener('data', onData);
        req.removeListener('end', handOn);
        req.removeListener('error', handOn);
        req.pause();
        const entry = chunk.length === length ? hitOf(chunk) : undefined;
        if (!entry) {
          // given back before anything else reads: the route's body parser resumes the stream and reads it whole
          req.unshift(chunk);
          next(req, res);
          return;
        }
        req.resume(); // the body was this one chunk: let the request end
        door.answered++;
        answer(req, res, entry, started);
      };
      req.on('data', onData);
      req.on('end', handOn);
      req.on('error', handOn);
    },
    { answered: 0 },
  );
  return door;
}

/** Puts `door` in front of the server's request handlers (Fastify's, and what wraps it later: Socket.IO's). */
export function installFrontDoor(server: Server, door: (req: IncomingMessage, res: ServerResponse, next: Handler) => void): void {
  const handlers = server.listeners('request') as Handler[];
  server.removeAllListeners('request');
  const next: Handler = (req, res) => {
    for (const handler of handlers) handler(req, res);
  };
  server.on('request', (req: IncomingMessage, res: ServerResponse) => door(req, res, next));
}
