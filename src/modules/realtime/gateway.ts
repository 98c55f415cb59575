import type { createAdapter } from '@socket.io/redis-adapter';
import type { Redis } from 'ioredis';
import { Server, type Socket } from 'socket.io';
import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';
import { quitRedis, REDIS_HEARTBEAT_MS, startRedisHeartbeat } from '../../platform/redis-heartbeat.js';
import { AppError } from '../../shared/errors.js';
import type { AuthInvalidation } from '../identity/auth-cache.js';
import { resolveAuth, resolveSession, type AuthContext } from '../identity/auth-context.js';

/** The event a Q&A answer streams on, and its payload (contract §6). */
export const RECEIVE_STREAM = 'RECEIVE_STREAM';

export interface StreamChunk {
  /** The Q&A request's `id`. */
  id: number;
  chunk: string;
  /** 0, 1, 2, ... in emission order; the last event (done) carries the next index. */
  index: number;
  done: boolean;
  usage?: number;
  credits?: number;
  /** Only on a last event of a failed request. */
  error?: string;
}

interface SocketData {
  userId: string;
  sessionId: string;
  institutionId: string | null;
  /**
   * While its session is being checked again (an invalidation concerned it), the answer chunks for this socket
   * wait here: delivered in order once the check passes, dropped with the socket when it fails. A logout answered
   * 200 therefore lets no chunk through to the session's sockets after it.
   */
  held?: StreamChunk[];
  /** checks in flight (another invalidation can come while one runs) */
  checks?: number;
}

const tooManySocketsMessage = (cap: number) => `At most ${cap} connections per user: close another one first`;

/** resolveSession's recordActivity for the gateway's own checks: not the user's doing. */
const noActivity = false;

/** One check of a socket's session ended well: once none is left, the chunks held meanwhile go out, in order. */
function release(socket: Socket): void {
  const data = socket.data as SocketData;
  data.checks = (data.checks ?? 1) - 1;
  if (data.checks > 0 || !data.held) return;
  const held = data.held;
  data.held = undefined;
  if (socket.connected) for (const payload of held) socket.emit(RECEIVE_STREAM, payload);
}

/** The reason a socket is closed when its session ends (logout, revocation, disabled user...), emitted before the disconnect. */
export const SESSION_ENDED = 'SESSION_ENDED';

/** Where one answer streams to: the caller's own connected socket, on this node or another. */
export interface StreamSink {
  /** Emits one chunk; false when the socket is known to be gone (the answer then continues without streaming). */
  emit(payload: StreamChunk): boolean;
  /**
   * Whether the socket is still connected after what was emitted: asked before an answer is saved, so that
   * streamingFailed is true when the socket went away mid-answer (on another node, emits cannot tell).
   */
  connected(): Promise<boolean>;
}

/** Refused handshake (and closing event) of a user who already holds SOCKETS_PER_USER sockets on this node. */
export const TOO_MANY_SOCKETS = 'TOO_MANY_SOCKETS';

/**
 * The largest message a client may send (a handshake's auth is one): clients only listen (RECEIVE_STREAM,
 * SESSION_ENDED), so Socket.IO's default of 1 MB a message is memory an attacker could make each socket hold.
 */
const MAX_CLIENT_MESSAGE_BYTES = 64 * 1024;

/** A socket on another node is looked up again (across nodes) at most this often while chunks are emitted to it. */
const REMOTE_CHECK_MS = 1_000;

/**
 * Socket.IO 4 on the API's own HTTP server (default path /socket.io, polling and websocket).
 * Handshake: `auth: {token}` carrying an access token, checked exactly like an HTTP request (session
 * not revoked or expired, user active); otherwise the connection is refused with "UNAUTHENTICATED".
 * With REDIS_URL the Redis adapter joins the nodes: a socket connected to another node is found
 * (fetchSockets) and reached (room of the socket id) from any node.
 */
/** The Redis client and Socket.IO adapter, imported only when REDIS_URL is set (start-up time otherwise). */
export interface RedisAdapterModules {
  Redis: typeof Redis;
  createAdapter: typeof createAdapter;
}

export async function loadRedisAdapterModules(): Promise<RedisAdapterModules> {
  const [{ Redis: client }, { createAdapter: adapter }] = await Promise.all([import('ioredis'), import('@socket.io/redis-adapter')]);
  return { Redis: client, createAdapter: adapter };
}

export class RealtimeGateway {
  readonly io: Server;
  private readonly redis: Redis[] = [];
  /** connected sockets on this node by user (SOCKETS_PER_USER) */
  private readonly perUser = new Map<string, number>();
  private stopHeartbeat: () => void = () => undefined;

  constructor(
    app: App,
    private readonly ctx: AppContext,
    redisModules?: RedisAdapterModules,
  ) {
    // Socket.IO answers /socket.io/ before Fastify sees the request, so @fastify/cors never applies there:
    // the same allow-list is given to Socket.IO itself (with credentials, as for the API). Without
    // CORS_ORIGINS no CORS headers are sent, as on every other route; never `*`.
    const { corsOrigins } = ctx.config;
    this.io = new Server(app.server, {
      serveClient: false,
      transports: ['polling', 'websocket'],
      maxHttpBufferSize: MAX_CLIENT_MESSAGE_BYTES,
      ...(corsOrigins.length > 0 ? { cors: { origin: [...corsOrigins], credentials: true } } : {}),
    });
    if (ctx.config.redisUrl) {
      if (!redisModules) throw new Error('REDIS_URL is set: load the Redis adapter first (loadRedisAdapterModules)');
      const { Redis, createAdapter } = redisModules;
      const pub = new Redis(ctx.config.redisUrl, { lazyConnect: false, maxRetriesPerRequest: 2 });
      const sub = pub.duplicate();
      for (const r of [pub, sub]) r.on('error', (err) => ctx.log.warn({ err }, 'socket.io redis adapter connection error'));
      this.redis.push(pub, sub);
      // a half-open link would silently stop streams to sockets on other nodes: found by ping, and reconnected
      this.stopHeartbeat = startRedisHeartbeat([pub, sub], REDIS_HEARTBEAT_MS, (err) => ctx.log.warn({ err }, 'socket.io redis adapter connection is silent'));
      this.io.adapter(createAdapter(pub, sub, { requestsTimeout: 2000 }));
    }
    this.io.use((socket, next) => {
      const raw = (socket.handshake.auth as { token?: unknown } | undefined)?.token;
      const token = typeof raw === 'string' ? raw.replace(/^Bearer\s+/iu, '').trim() : '';
      if (!token) return next(Object.assign(new Error('UNAUTHENTICATED'), { data: { message: 'Missing access token: connect with auth: {token}' } }));
      // An invalidation while the session is read (a logout committing meanwhile) does not reach this socket:
      // recheck() passes over sockets still in their handshake. So while one came (the auth cache counts
      // them), the session is read again.
      const counts = ctx.auth.cache.stats;
      const authenticate = async (): Promise<AuthContext> => {
        let seen = counts.invalidations;
        let auth = await resolveAuth(ctx.db, ctx.tokens, token, ctx.clock.now(), ctx.auth);
        while (counts.invalidations !== seen) {
          seen = counts.invalidations;
          auth = await resolveSession(ctx.db, auth, ctx.clock.now(), ctx.auth);
        }
        return auth;
      };
      authenticate().then(
        (auth) => {
          // the common case of the cap, refused in the handshake (a burst that passes here together is capped on connection)
          if ((this.perUser.get(auth.userId) ?? 0) >= this.ctx.config.socketsPerUser) return next(Object.assign(new Error(TOO_MANY_SOCKETS), { data: { message: tooManySocketsMessage(this.ctx.config.socketsPerUser) } }));
          (socket.data as SocketData) = { userId: auth.userId, sessionId: auth.sessionId, institutionId: auth.institutionId };
          next();
        },
        (err: unknown) => {
          const message = err instanceof AppError ? err.message : 'Authentication failed';
          if (!(err instanceof AppError)) ctx.log.error({ err }, 'socket authentication failed');
          next(Object.assign(new Error('UNAUTHENTICATED'), { data: { message } }));
        },
      );
    });
    // The cap, counted on connection (synchronously: exact, whatever passed the handshake together): a socket beyond
    // it is told why and closed at once.
    this.io.on('connection', (socket) => {
      const { userId } = socket.data as SocketData;
      const count = (this.perUser.get(userId) ?? 0) + 1;
      this.perUser.set(userId, count);
      socket.once('disconnect', () => {
        const left = (this.perUser.get(userId) ?? 1) - 1;
        if (left > 0) this.perUser.set(userId, left);
        else this.perUser.delete(userId);
      });
      if (count > ctx.config.socketsPerUser) {
        socket.emit(TOO_MANY_SOCKETS, { message: tooManySocketsMessage(ctx.config.socketsPerUser) });
        socket.disconnect(true);
      }
    });
    const stopWatching = ctx.auth.cache.onInvalidation((event) => this.recheck(event));
    // Sockets are closed before the HTTP server drains, or their long-lived connections would hold it open.
    app.addHook('preClose', async () => {
      stopWatching();
      this.io.disconnectSockets(true);
      this.io.engine.close();
    });
    app.addHook('onClose', async () => {
      this.stopHeartbeat();
      await quitRedis(this.redis);
    });
  }

  /** Checks again the session of every local socket `event` concerns (after the auth cache dropped what it names); one read per session. */
  private recheck(event: AuthInvalidation): void {
    const bySession = new Map<string, Socket[]>();
    for (const socket of this.io.sockets.sockets.values()) {
      const data = socket.data as SocketData | undefined;
      if (!data?.sessionId) continue; // still in its handshake: it reads the session again (see the middleware)
      if (event.kind === 'session' && data.sessionId !== event.id) continue;
      if (event.kind === 'user' && data.userId !== event.id) continue;
      const group = bySession.get(data.sessionId);
      if (group) group.push(socket);
      else bySession.set(data.sessionId, [socket]);
    }
    for (const group of bySession.values()) {
      for (const socket of group) {
        const data = socket.data as SocketData;
        data.held ??= [];
        data.checks = (data.checks ?? 0) + 1;
      }
      // a check that is not the user's doing: the session's last activity is not moved by it
      resolveSession(this.ctx.db, group[0]!.data as SocketData, this.ctx.clock.now(), this.ctx.auth, noActivity).then(
        () => {
          for (const socket of group) release(socket);
        },
        (err: unknown) => {
          if (!(err instanceof AppError)) {
            this.ctx.log.warn({ err }, 'could not check the session of a socket again; it stays connected until the next invalidation');
            for (const socket of group) release(socket);
            return;
          }
          for (const socket of group) {
            (socket.data as SocketData).held = undefined;
            socket.emit(SESSION_ENDED, { message: err.message });
            socket.disconnect(true);
          }
        },
      );
    }
  }

  /** Ends a socket whose session is over (expired, revoked) when an answer looks for it: nothing is streamed to it. */
  private async sessionEnded(data: SocketData, socket?: Socket): Promise<boolean> {
    try {
      await resolveSession(this.ctx.db, data, this.ctx.clock.now(), this.ctx.auth, noActivity);
      return false;
    } catch (err) {
      if (!(err instanceof AppError)) {
        this.ctx.log.warn({ err }, 'could not check the session of a socket an answer streams to; streaming to it');
        return false;
      }
      if (socket) {
        socket.emit(SESSION_ENDED, { message: err.message });
        socket.disconnect(true);
      }
      return true;
    }
  }

  /**
   * The sink of `socketId` when it is connected (on any node) and belongs to `userId`; null otherwise
   * (the answer is then synchronous). A socket of another user is never returned.
   */
  async sinkFor(socketId: string, userId: string): Promise<StreamSink | null> {
    const local = this.io.sockets.sockets.get(socketId) as Socket | undefined;
    if (local) {
      const data = local.data as SocketData;
      if (!local.connected || data.userId !== userId) return null;
      // a session that expired publishes nothing: checked here, as an HTTP request would be
      if (await this.sessionEnded(data, local)) return null;
      return {
        emit: (payload) => {
          if (!local.connected) return false;
          if (data.held) data.held.push(payload);
          else local.emit(RECEIVE_STREAM, payload);
          return true;
        },
        connected: async () => local.connected,
      };
    }
    if (!this.ctx.config.redisUrl) return null;
    try {
      const found = await this.io.in(socketId).fetchSockets();
      const remote = found.find((s) => s.id === socketId && (s.data as SocketData).userId === userId);
      if (!remote || (await this.sessionEnded(remote.data as SocketData))) return null;
      const room = this.io.to(socketId);
      // Emits to another node are fire-and-forget: the socket is looked up again now and then (and before the
      // answer is saved); once it is not found, or cannot be looked up (Redis down: the chunks did not go either),
      // the sink reports it gone.
      let gone = false;
      let lastCheck = performance.now();
      let checking: Promise<boolean> | undefined;
      const check = (): Promise<boolean> =>
        (checking ??= this.io
          .in(socketId)
          .fetchSockets()
          .then(
            (now) => now.some((s) => s.id === socketId),
            (err: unknown) => {
              this.ctx.log.warn({ err }, 'could not look up a streaming socket on the other nodes again');
              return false;
            },
          )
          .then((alive) => {
            if (!alive) gone = true;
            checking = undefined;
            lastCheck = performance.now();
            return !gone;
          }));
      return {
        emit: (payload) => {
          if (gone) return false;
          room.emit(RECEIVE_STREAM, payload);
          if (performance.now() - lastCheck >= REMOTE_CHECK_MS) void check();
          return true;
        },
        connected: async () => !gone && (await check()),
      };
    } catch (err) {
      this.ctx.log.warn({ err }, 'could not look up a socket on the other nodes');
      return null;
    }
  }
}
