import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import Fastify, { type FastifyReply, type RouteOptions } from 'fastify';
import secureJson from 'secure-json-parse';
import cookie from '@fastify/cookie';
import cors from '@fastify/cors';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { AppConfig } from './config.js';
import type { AppContext, Providers } from './context.js';
import { BACKGROUND_GIVE_WAY } from './db/activity.js';
import { databaseOptionsFor, openDatabase, type Database } from './db/client.js';
import type { EarlyPglite } from './db/early.js';
import { LISTED_ERRORS_MAX, registerErrorHandling } from './http/errors.plugin.js';
import { staticSecurityHeaders } from './http/security-headers.js';
import type { Registry } from 'prom-client';
import { registerMetrics } from './http/metrics.plugin.js';
import { openapiTransforms } from './http/openapi.js';
import { Shutdown } from './platform/shutdown.js';
import { DEFAULT_VECTOR_DRAIN, VECTOR_DRAIN_LOCK_TIMEOUT_MS, VectorDrain } from './modules/search/vector-drain.js';
import type { App } from './http/types.js';
import { healthRoutes } from './modules/health/health.routes.js';
import { identityRoutes } from './modules/identity/identity.routes.js';
import { TokenService } from './modules/identity/tokens.js';
import { ActivityRecorder, AuthCache, type AuthInvalidation } from './modules/identity/auth-cache.js';
import { InProcessChannel, type InvalidationChannel } from './platform/invalidation-channel.js';
import { tenancyRoutes } from './modules/tenancy/tenancy.routes.js';
import { mfaRoutes } from './modules/mfa/mfa.routes.js';
import { vaultRoutes } from './modules/vault/vault.routes.js';
import { memoryRoutes } from './modules/memory/memory.routes.js';
import { settingsRoutes } from './modules/settings/settings.routes.js';
import { brandingRoutes } from './modules/branding/branding.routes.js';
import { cloudRoutes } from './modules/cloud/cloud.routes.js';
import { ssoRoutes } from './modules/sso/sso.routes.js';
import { adminSessionsRoutes } from './modules/admin/sessions.routes.js';
import { IndexWarmer } from './modules/search/indexing.js';
import { SegmentCache } from './modules/search/segments.js';
import { ScopeCache, UploadRowCache } from './modules/search/scopes.js';
import { CACHE_RESET, ChannelInvalidationBus, type CacheInvalidation } from './platform/invalidation.js';
import { IdempotencyKeys } from './platform/idempotency.js';
import { searchRoutes } from './modules/search/search.routes.js';
import { conversationRoutes } from './modules/conversation/conversation.routes.js';
import { loadRedisAdapterModules, RealtimeGateway } from './modules/realtime/gateway.js';
import { createEmbedder } from './providers/embeddings/index.js';
import { createChatModel, stoppedBy } from './providers/llm/index.js';
import { createMailSender } from './providers/mail/index.js';
import { createBlobStorage } from './providers/storage/index.js';
import { ensureBootstrapAdmin } from './modules/tenancy/bootstrap.js';
import { systemClock, type Clock } from './shared/clock.js';
import { AppError, errorBody } from './shared/errors.js';
import { ErrorBodySchema } from './shared/schemas.js';
import { REPLAYED_HEADER } from './platform/idempotency.js';

export interface BuildAppOptions {
  config: AppConfig;
  /** An already open database (tests); otherwise one is opened from the config and closed with the app. */
  database?: Database;
  clock?: Clock;
  /** Skip migrations (the caller already ran them). */
  skipMigrations?: boolean;
  /** Replace providers (tests point them at local servers). */
  providers?: Partial<Providers>;
  /**
   * The channel auth invalidations travel on (tests share one between two apps on one database to
   * stand for two nodes). Default: Redis pub/sub with REDIS_URL, else this process only. A channel
   * given here is not closed with the app.
   */
  invalidationChannel?: InvalidationChannel<AuthInvalidation>;
  /** The same for the topics of the other caches (branding, memory): platform/invalidation.ts. */
  cacheInvalidationChannel?: InvalidationChannel<CacheInvalidation>;
  /** The embedded database's worker, started before the app's modules loaded (cli serve). */
  early?: EarlyPglite;
  /**
   * Called for every route as it is registered (method, url template, schema), before the app is
   * ready: the authorization matrix and the fuzzer read the route table of the real app through it.
   */
  onRoute?: (route: RouteOptions) => void;
}

export type { App };

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

/**
 * Bodies are validated strictly (a string where a number belongs is a 400, per the contract); query
 * strings and path parameters arrive as text, so there scalar types are coerced.
 * `checkSchemas`: check each route schema against JSON Schema's meta-schema when it compiles. The tests
 * do (test/fuzz.test.ts sends requests to every route, which compiles its schemas); a server does not:
 * compiling the meta-schema was about 90 ms of its start-up, and the schemas are the constants the tests
 * checked.
 */
function validatorCompilers(checkSchemas: boolean) {
  const base = { useDefaults: true, removeAdditional: true, strict: false, validateSchema: checkSchemas } as const;
  const make = (coerceTypes: false | 'array', allErrors: boolean) => {
    const ajv = addFormats(new Ajv({ ...base, coerceTypes, allErrors }));
    ajv.addSchema(ErrorBodySchema);
    return ajv;
  };
  const body = { first: make(false, false), every: make(false, true) };
  const other = { first: make('array', false), every: make('array', true) };
  return ({ schema, httpPart }: { schema: object; httpPart?: string }) => lazyValidator(httpPart === 'body' ? body : other, schema);
}

/** Values (of objects, arrays and scalars) a failed request may have for its errors to be listed one by one. */
const LISTED_ERRORS_MAX_VALUES = 2000;

/** Whether `value` holds at most `budget` values (walked no further than that). */
function holdsAtMost(value: unknown, budget: number): boolean {
  const stack: unknown[] = [value];
  let seen = 0;
  while (stack.length > 0) {
    if (++seen > budget) return false;
    const v = stack.pop();
    if (v !== null && typeof v === 'object') for (const child of Object.values(v)) stack.push(child);
  }
  return true;
}

/*
 * Route schemas compile on their first use, not at start: compiling the validators (ajv) and response
 * serializers (fast-json-stringify) of every route was about 0.4 s of the start-up profile
 * (bench/RESULTS.md), while most processes use a fraction of the routes. The first request of a route
 * pays its compilation once (a few milliseconds). The compiled code is the same as Fastify's own.
 */

/**
 * An ajv validator compiled on its first call. `schemaEnv` tells Fastify to pass the parent data (ajv may
 * replace the root value). Valid requests pay one pass that stops at the first error; a failed one is
 * validated again with every error (contract: "details list each field"), by a second validator compiled on
 * the first failure, unless it is large: ajv's every-error mode makes an error object per failing element,
 * which a 2 MB array would turn into a million on the request loop. Then the first error alone is listed.
 */
function lazyValidator(ajv: { first: Ajv; every: Ajv }, schema: object) {
  let first: ValidateFunction | undefined;
  let every: ValidateFunction | undefined;
  const validate = Object.assign(
    (data: unknown, context?: Parameters<ValidateFunction>[1]) => {
      first ??= ajv.first.compile(schema);
      if (first(data, context)) {
        validate.errors = null;
        return true;
      }
      validate.errors = first.errors;
      if (holdsAtMost(data, LISTED_ERRORS_MAX_VALUES)) {
        every ??= ajv.every.compile(schema);
        if (!every(data, context) && every.errors?.length) validate.errors = every.errors.slice(0, LISTED_ERRORS_MAX);
      }
      return false;
    },
    { errors: null as ValidateFunction['errors'], schemaEnv: true },
  );
  return validate;
}

/** Fastify's own serializer factory (fast-json-stringify), each route's serializer built on its first response. */
function lazySerializerFactory(externalSchemas: unknown, serializerOptions: unknown) {
  const compile = SerializerSelector()(externalSchemas as never, serializerOptions as never);
  return (route: Parameters<typeof compile>[0]) => {
    let serialize: ((data: unknown) => string) | undefined;
    return (data: unknown) => (serialize ??= compile(route) as (data: unknown) => string)(data);
  };
}

/**
 * Request ids: unique per process start (a random prefix) plus a counter. A UUID per request cost
 * ~6% of the CPU of GET /api/user/me in the profile (16 random bytes from the kernel each time).
 */
const requestIdPrefix = randomBytes(6).toString('base64url');
let requestCounter = 0;
const nextRequestId = () => `${requestIdPrefix}-${(++requestCounter).toString(36)}`;

export async function buildApp(options: BuildAppOptions): Promise<App> {
  const { config } = options;
  const clock = options.clock ?? systemClock;
  const ownsDatabase = !options.database;
  let onConnectionError: (err: Error) => void = () => undefined;
  // The database opens (in its worker thread, or over the network) while this thread sets up the HTTP
  // side, which needs no database: at start-up on an existing data directory, opening PGlite is the
  // longest step (bench/RESULTS.md), and the plugins and the OpenAPI document fit in its shadow.
  const opening = options.database ? undefined : openDatabase({ ...databaseOptionsFor(config), early: options.early, onConnectionError: (err) => onConnectionError(err) });
  opening?.catch(() => undefined); // observed below; not an unhandled rejection while the HTTP side is set up
  let app: App;
  let database: Database;
  const shutdown = new Shutdown(config.shutdownTimeoutMs);
  try {
    app = await httpApp(config, options.onRoute, shutdown);
    onConnectionError = (err) => app.log.warn({ err }, 'a database connection failed (idle, or inside a transaction); the pool opens a new one');
    for (const warning of config.warnings) app.log.warn(`configuration: ${warning}`);
    database = options.database ?? (await opening!);
    if (!options.skipMigrations) await database.migrate();
  } catch (err) {
    // the database this opened (opening anyway, or failing its migrations) is closed: its data directory lock is released
    await opening?.then((db) => db.close()).catch(() => undefined);
    throw err;
  }
  const ownsChannel = !options.invalidationChannel;
  const channel =
    options.invalidationChannel ?? (await invalidationChannelFor<AuthInvalidation>(config, app, 'twin:auth-invalidation', { kind: 'all' }));
  const ownsCacheChannel = !options.cacheInvalidationChannel;
  const cacheChannel =
    options.cacheInvalidationChannel ?? (await invalidationChannelFor<CacheInvalidation>(config, app, 'twin:cache-invalidation', CACHE_RESET));
  const invalidation = new ChannelInvalidationBus(cacheChannel);
  const searchIndex = new SegmentCache(config.searchIndexCacheMb * 1024 * 1024);
  const ctx: AppContext = {
    config,
    database,
    db: database.db,
    clock,
    tokens: new TokenService(config.jwtSecret, config.accessTokenTtlSeconds, config.refreshTokenTtlSeconds),
    auth: {
      cache: new AuthCache({ maxEntries: config.authCacheMaxEntries, ttlMs: config.authCacheTtlSeconds * 1000, channel }),
      activity: new ActivityRecorder(database.db, app.log),
    },
    log: app.log,
    // Created lazily so that a misconfigured provider fails the routes that need it, with its own message.
    providers: lazyProviders(config, database, app, options.providers ?? {}, shutdown),
    invalidation,
    searchIndex,
    searchScopes: new ScopeCache(),
    searchUploadRows: new UploadRowCache(),
    indexWarmer: new IndexWarmer(database.background?.db ?? database.db, searchIndex, app.log, database.background?.giveWay),
    // on the embedded engine the drain's statements are not the app's activity: they give way to it
    vectorDrain: new VectorDrain(database.background?.db ?? database.db, app.log, {
      ...DEFAULT_VECTOR_DRAIN,
      ...(database.background ? { giveWay: { activity: database.background.activity, ...BACKGROUND_GIVE_WAY } } : {}),
      ...(database.kind === 'pglite' ? { vacuum: true } : { vacuum: false, lockTimeoutMs: VECTOR_DRAIN_LOCK_TIMEOUT_MS }),
    }),
    shutdown,
    idempotency: new IdempotencyKeys(database.db, clock, app.log),
  };
  app.decorate('ctx', ctx);
  // the leases of running keyed requests are renewed from the start until the app closes (after the drain)
  app.addHook('onReady', async () => ctx.idempotency.start());
  await healthRoutes(app, ctx);
  const identity = await identityRoutes(app, ctx);
  await tenancyRoutes(app, ctx);
  await mfaRoutes(app, ctx, identity);
  await vaultRoutes(app, ctx);
  await memoryRoutes(app, ctx);
  await settingsRoutes(app, ctx);
  await brandingRoutes(app, ctx);
  await cloudRoutes(app, ctx);
  await ssoRoutes(app, ctx);
  await adminSessionsRoutes(app, ctx);
  await searchRoutes(app, ctx);
  const realtime = new RealtimeGateway(app, ctx, config.redisUrl ? await loadRedisAdapterModules() : undefined);
  app.decorate('realtime', realtime);
  await conversationRoutes(app, ctx, realtime);

  await ensureBootstrapAdmin(ctx);

  app.addHook('onClose', async () => {
    ctx.auth.cache.close();
    if (ownsChannel) await channel.close();
    invalidation.close();
    if (ownsCacheChannel) await cacheChannel.close();
    await ctx.auth.activity.flush();
    await ctx.idempotency.stop();
    if (ownsDatabase) await database.close();
  });
  return app;
}

/** The HTTP side: Fastify with its parsers, hooks, plugins and the OpenAPI document; nothing here needs the database. */
async function httpApp(config: AppConfig, onRoute: BuildAppOptions['onRoute'], shutdown: Shutdown): Promise<App> {
  // JSON only, so no content security policy is needed on the API (and /docs needs its inline script);
  // nosniff, frame and referrer protection on every answer; HSTS when configured (behind TLS). helmet's
  // headers, computed once, set by one hook into Fastify's own header object (written once with the
  // status line) instead of helmet's middleware on every request; the answers made before routing
  // (framework and HTTP-parser errors) carry them too.
  const securityHeaders = staticSecurityHeaders(config.hstsMaxAgeSeconds);
  const app = Fastify({
    schemaController: { compilersFactory: { buildSerializer: lazySerializerFactory as never } },
    logger: {
      level: config.logLevel,
      redact: ['req.headers.authorization', 'req.headers["x-access-token"]', 'req.headers.cookie'],
    },
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.:-]{1,128}$/.test(given) ? given : nextRequestId();
    },
    trustProxy: config.trustProxy,
    bodyLimit: 2 * 1024 * 1024,
    // Long ids reach the route and fail its schema; what the router itself refuses (an over-long
    // parameter, a malformed URL) still answers with the contract's body.
    routerOptions: { maxParamLength: 1000 },
    frameworkErrors: (error, request, reply) => {
      const invalidPath = error.code === 'FST_ERR_BAD_URL' || error.code === 'FST_ERR_MAX_PARAM_LENGTH';
      // no hook runs for these answers: the headers every other answer gets are set here
      (reply as unknown as FastifyReply)
        .headers({ ...securityHeaders, 'cache-control': 'no-store', 'x-request-id': request.id })
        .code(400)
        .send(errorBody('VALIDATION_FAILED', invalidPath ? 'The request path is not valid' : 'The request is not valid'));
    },
    // new requests while closing get the contract's 503 from the first onRequest hook (Fastify's own has another body)
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // Fastify times each step of close() (and of the start) by this: the default 10 s would let the database
    // close under a shutdown still draining (platform/shutdown.ts), whose budget bounds it instead.
    pluginTimeout: Math.max(10_000, shutdown.budgetMs + 5_000),
    // Errors Node's HTTP parser raises before there is a request (headers too large, a timeout, a
    // malformed request line) still answer with the contract's body.
    clientErrorHandler: clientErrorAnswerer(securityHeaders),
  }).withTypeProvider<TypeBoxTypeProvider>() as unknown as App;

  if (onRoute) {
    app.addHook('onRoute', (route) => onRoute(route));
  }
  app.setValidatorCompiler(validatorCompilers(config.nodeEnv === 'test'));
  // JSON as Fastify parses it (prototype-poisoning safe), except that an empty body is "no body":
  // clients often send `content-type: application/json` on POSTs that take none (mfa-enroll, sanitize).
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, secureJson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' }));
    } catch (err) {
      done(Object.assign(new Error((err as Error).message), { statusCode: 400, code: 'FST_ERR_CTP_INVALID_JSON_BODY' }), undefined);
    }
  });
  // Fastify also reads text/plain by default, as a string no route's schema takes: a JSON body sent as text (what
  // fetch sends for a string body without a content type) was a 400 "body must be object". No route reads text,
  // so it is the 415 of any other content type the API does not read (errors.plugin.ts).
  app.removeContentTypeParser('text/plain');
  app.addSchema(ErrorBodySchema);
  // Callback-style (not async) hooks on the hot path: no promise per request.
  app.addHook('onSend', (request, reply, payload, done) => {
    reply.header('x-request-id', request.id);
    // API answers carry tokens and personal data: no shared or browser cache keeps them.
    if (request.url.startsWith('/api/') && !reply.hasHeader('cache-control')) reply.header('cache-control', 'no-store');
    // While shutting down, answers to in-flight requests close their keep-alive connection, so the
    // server can finish draining instead of waiting for idle clients to hang up.
    if (shutdown.closing.aborted) reply.header('connection', 'close');
    done(null, payload);
  });
  // the first close hook: the requests in flight finish (or are stopped) before sockets, workers and the database close
  app.addHook('preClose', () => shutdown.drain());

  app.decorateRequest('auth', null);

  registerErrorHandling(app);
  app.addHook('onRequest', (_request, reply, done) => {
    reply.headers(securityHeaders);
    // A request that arrives while the server drains is not started: 503 in the contract's body, its connection
    // closed (onSend), and the drain does not wait for it.
    if (shutdown.closing.aborted) return done(shuttingDown());
    shutdown.track(reply.raw);
    done();
  });
  // Cross-origin browsers are allowed only from the configured origins. Without CORS_ORIGINS the plugin
  // is not registered at all: no CORS headers, and no preflight route (OPTIONS is then a plain 404).
  if (config.corsOrigins.length > 0) {
    await app.register(cors, {
      origin: config.corsOrigins,
      credentials: true,
      methods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
      // every request header the API reads, and every answer header a client acts on: a browser keeps no POST answer in
      // its cache, so a client revalidating the branding (a POST) reads its ETag and sends If-None-Match itself; a
      // download's file name is in Content-Disposition
      allowedHeaders: ['authorization', 'x-access-token', 'content-type', 'x-request-id', 'idempotency-key', 'if-none-match'],
      exposedHeaders: ['retry-after', 'x-request-id', REPLAYED_HEADER, 'etag', 'content-disposition'],
      maxAge: 600,
    });
  }
  await app.register(cookie);
  // With REDIS_URL the counters are Redis's, shared by every node (made by this process while Redis is out of reach)
  const sharedCounters = config.redisUrl
    ? new (await import('./platform/rate-limit-redis.js')).SharedRateLimitCounters({
        url: config.redisUrl,
        onError: (err) => app.log.warn({ err }, 'rate-limit counters (Redis) error; the limits count in this process until Redis answers again'),
      })
    : undefined;
  if (sharedCounters) {
    app.addHook('onReady', async () => sharedCounters.start());
    app.addHook('onClose', () => sharedCounters.close());
  }
  await app.register(rateLimit, {
    ...(sharedCounters ? { store: sharedCounters.storeClass() } : {}),
    global: false,
    hook: 'preHandler',
    errorResponseBuilder: (_request, context) => new AppError(429, 'RATE_LIMITED', `Too many requests, retry in ${context.after}`, [], { 'retry-after': String(Math.max(1, Math.ceil(context.ttl / 1000))) }),
  });
  await app.register(swagger, {
    ...openapiTransforms(),
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Twin Assistant API',
        version: '0.1.0',
        description:
          'Multi-tenant AI assistant platform. Every failure answers `{success:false, message, error:{code, details}}`. ' +
          'Authenticated routes accept the access token as `Authorization: Bearer <t>` or `x-access-token: <t>`.',
      },
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
          accessToken: { type: 'apiKey', in: 'header', name: 'x-access-token' },
        },
      },
      tags: [
        { name: 'auth', description: 'Login, tokens, sessions' },
        { name: 'user', description: 'The current user' },
        { name: 'admin', description: 'Administration of accounts, institutions, users and memberships' },
        { name: 'mfa', description: 'Multi-factor authentication by e-mailed code and trusted devices' },
        { name: 'vault', description: 'Files, collections, embedding chunks and AI sanitize' },
        { name: 'memory', description: 'Memory parameters (personal and shared key/value records) and their administration' },
        { name: 'settings', description: 'Settings (instance variables) of an institution' },
        { name: 'branding', description: 'Institution lookup by LTI context and public branding of a digital twin' },
        { name: 'cloud', description: 'Third-party cloud-services tokens of an institution' },
        { name: 'sso', description: 'SSO identity providers and their connectivity test' },
        { name: 'search', description: 'Content search: dense, BM25 and knowledge-graph retrieval with fusion' },
        { name: 'conversation', description: 'Q&A (streamed over Socket.IO RECEIVE_STREAM), assistants and history records' },
        { name: 'dev', description: 'Development helpers (not in production)' },
        { name: 'ops', description: 'Health and readiness' },
      ],
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  app.decorate('metrics', registerMetrics(app, { token: config.metricsToken }));
  return app;
}

/** The answer to a request that arrives while the server shuts down (a new error each time: its headers are the caller's). */
function shuttingDown(): AppError {
  return new AppError(503, 'SERVICE_UNAVAILABLE', 'The server is shutting down; try again shortly (another node, or this one once it is back)', [], { 'retry-after': '1' });
}

/** Redis pub/sub when REDIS_URL is set (imported only then: start-up time), else this process only. */
async function invalidationChannelFor<E>(config: AppConfig, app: App, name: string, resetEvent: E): Promise<InvalidationChannel<E>> {
  if (!config.redisUrl) return new InProcessChannel<E>();
  const { RedisInvalidationChannel } = await import('./platform/invalidation-redis.js');
  return RedisInvalidationChannel.connect<E>({
    url: config.redisUrl,
    channel: name,
    resetEvent,
    onError: (err) => app.log.warn({ err, channel: name }, 'invalidation channel (Redis) error; caches are dropped on reconnect, and other nodes are told to drop theirs after a lost publish'),
  });
}


/** Answers the errors Node's HTTP parser raises before Fastify sees a request: status, code and message in the contract's body. */
function clientErrorAnswerer(securityHeaders: Record<string, string>) {
  const extraHeaders = Object.entries(securityHeaders)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  return function answerClientError(this: { log: { trace(o: object, m: string): void } }, err: Error & { code?: string }, socket: Socket): void {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, reason, body] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', errorBody('HEADERS_TOO_LARGE', 'Request header fields are too large')]
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? [408, 'Request Timeout', errorBody('REQUEST_TIMEOUT', 'The request took too long to arrive')]
          : [400, 'Bad Request', errorBody('VALIDATION_FAILED', 'The request is not valid HTTP')];
    this.log.trace({ err }, 'client error');
    if (socket.writable) {
      const text = JSON.stringify(body);
      socket.write(
        `HTTP/1.1 ${status} ${reason}\r\nContent-Length: ${Buffer.byteLength(text)}\r\nContent-Type: application/json; charset=utf-8\r\n` +
          `Cache-Control: no-store\r\n${extraHeaders}Connection: close\r\n\r\n${text}`,
      );
    }
    socket.destroy(err);
  };
}

function lazyProviders(config: AppConfig, database: Database, app: App, given: Partial<Providers>, shutdown: Shutdown): Providers {
  const made: Partial<Providers> = { ...given, chatModel: undefined };
  return {
    get mail() {
      return (made.mail ??= createMailSender(config, database.db, app.log));
    },
    // every model call, whichever route makes it, ends when the shutdown stops the requests in flight
    get chatModel() {
      return (made.chatModel ??= stoppedBy(given.chatModel ?? createChatModel(config.llm), shutdown.inFlight));
    },
    get embedder() {
      return (made.embedder ??= createEmbedder(config.embeddings));
    },
    get storage() {
      return (made.storage ??= createBlobStorage(config));
    },
  };
}

declare module 'fastify' {
  interface FastifyInstance {
    ctx: AppContext;
    realtime: RealtimeGateway;
    /** The Prometheus registry of /metrics (modules add their gauges). */
    metrics: Registry;
  }
}
