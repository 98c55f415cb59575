import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join, resolve } from 'node:path';
import type { LocalEmbedderVersion } from './providers/embeddings/local.js';
import { findOnnxModelFiles } from './providers/embeddings/onnx.js';
import type { EmbeddingsConfig } from './providers/embeddings/types.js';
import { DEFAULT_STREAM_MAX_MS, type LlmConfig } from './providers/llm/types.js';

export type NodeEnv = 'development' | 'production' | 'test';

export interface AppConfig {
  nodeEnv: NodeEnv;
  port: number;
  host: string;
  /** What a graceful shutdown may take in all (platform/shutdown.ts). */
  shutdownTimeoutMs: number;
  /** What is valid but probably not meant (a provider's variables set while another provider is chosen): logged at start. */
  warnings: string[];
  dataDir: string;
  databaseUrl?: string;
  redisUrl?: string;
  logLevel: string;
  /**
   * Whose X-Forwarded-For is believed (Fastify's trustProxy): nobody (false), every hop (true: the client's own
   * entry included, so only behind a proxy that overwrites the header), or the proxies at these addresses and
   * CIDR ranges (the client is then the nearest address no listed proxy stands for).
   */
  trustProxy: boolean | string[];
  jwtSecret: string;
  encryptionKey: string;
  accessTokenTtlSeconds: number;
  refreshTokenTtlSeconds: number;
  bootstrapAdminEmail?: string;
  bootstrapAdminPassword?: string;
  smtpUrl?: string;
  mailFrom: string;
  serviceName: string;
  cookieSecure: boolean;
  loginRateLimitPerIp: number;
  loginRateLimitPerEmail: number;
  loginRateLimitWindowSeconds: number;
  mfaChallengesPerWindow: number;
  searchRateLimitPerMinute: number;
  /** bound of the in-memory copies of upload search indexes (search/segments.ts), MB; 0 keeps none */
  searchIndexCacheMb: number;
  /** Vault uploads per user per minute, and sanitize (model) calls per user per minute. */
  uploadRateLimitPerMinute: number;
  sanitizeRateLimitPerMinute: number;
  uploadMaxBytes: number;
  ssoTestAllowPrivate: boolean;
  cloudRevokeUrls: Record<string, string>;
  /** Ingestion workers in this process; 0 disables background ingestion on this node. */
  ingestWorkers: number;
  /** Hours between this node's sweeps of stored files no upload references (vault/orphan-files.ts); 0: no sweep job on this node. */
  fileSweepIntervalHours: number;
  /** Auth cache: sessions kept, and the age bound of an entry (0 disables the cache). */
  authCacheMaxEntries: number;
  authCacheTtlSeconds: number;
  /** Run the embedded database in a worker thread (keeps its statements off the request loop). */
  pgliteWorker: boolean;
  /** Bounds of the ingestion sandbox process and the parsers (see vault/ingest/sandbox.ts, zip.ts). */
  ingest: {
    workerHeapMb: number;
    timeoutMs: number;
    maxInflatedBytes: number;
    maxCompressionRatio: number;
  };
  /** Personal-scope quota per user: files (not deleted) and their bytes. */
  personalMaxFiles: number;
  personalMaxBytes: number;
  /** GET /api/dev/outbox exists (for superadmins) only when true, and never in production. */
  devOutbox: boolean;
  /** Wrong-or-right currentPassword checks per user per login window (PATCH /api/user/me). */
  passwordCheckRateLimitPerUser: number;
  /** Refused (already used) e-mails per admin per hour before that admin may create no user until the hour ends. */
  adminEmailConflictsPerHour: number;
  /** Origins allowed by CORS (exact `scheme://host[:port]`); empty: no CORS headers at all. */
  corsOrigins: string[];
  /** Strict-Transport-Security max-age; 0: no HSTS header. */
  hstsMaxAgeSeconds: number;
  /** Bearer token for /metrics; without it /metrics answers loopback callers only. */
  metricsToken?: string;
  llm: LlmConfig;
  embeddings: EmbeddingsConfig;
  /** Credits per 1,000 input/output tokens per model ("*": any other model), optional discount in percent. */
  modelPrices: Record<string, ModelPrice>;
  contentFilter: ContentFilterConfig;
  /** Q&A requests per user per minute. */
  qandaRateLimitPerMinute: number;
  /** Socket.IO connections one user may hold open on one node. */
  socketsPerUser: number;
}

export interface ModelPrice {
  input: number;
  output: number;
  /** Percent taken off the cost of this model (0..100); recorded on the history record. */
  discount?: number;
}

export interface ContentFilterConfig {
  /** Blocked words or phrases (case-insensitive, whole words). */
  terms: string[];
  /** Blocked regular expressions (case-insensitive), from the operator. */
  patterns: string[];
  /** How long the patterns may take on one request's texts (they run in a worker thread); past it the request is refused. */
  patternTimeoutMs: number;
  /** A provider moderation call (OpenAI /moderations wire format) when a base URL is set. */
  moderationBaseUrl?: string;
  moderationApiKey?: string;
  moderationModel: string;
  moderationTimeoutMs: number;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Public revoke endpoints of the cloud providers we know; CLOUD_REVOKE_URLS overrides or extends them. */
const DEFAULT_CLOUD_REVOKE_URLS: Record<string, string> = {
  google: 'https://oauth2.googleapis.com/revoke',
  // Microsoft's identity platform has no RFC 7009 token revoke; Graph revokes the user's sign-in sessions with the token as bearer.
  microsoft: 'https://graph.microsoft.com/v1.0/me/revokeSignInSessions',
  dropbox: 'https://api.dropboxapi.com/2/auth/token/revoke',
};

type Env = Record<string, string | undefined>;

/**
 * Reads and validates the environment. Every problem is collected so that one start tells the
 * operator everything that is wrong. In development and test, missing secrets are generated once and
 * kept in DATA_DIR/secrets.json so that tokens survive restarts; production demands them.
 */
export function loadConfig(env: Env = process.env, overrides: Partial<AppConfig> = {}): AppConfig {
  const problems: string[] = [];
  const warnings: string[] = [];
  const str = (name: string): string | undefined => {
    const v = env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  };
  const int = (name: string, def: number, min: number, max: number): number => {
    const raw = str(name);
    if (raw === undefined) return def;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max) {
      problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
      return def;
    }
    return n;
  };
  /** true or false as the variable spells it; undefined when it is neither */
  const boolOf = (raw: string): boolean | undefined => (/^(1|true|yes|on)$/i.test(raw) ? true : /^(0|false|no|off)$/i.test(raw) ? false : undefined);
  const bool = (name: string, def: boolean): boolean => {
    const raw = str(name);
    if (raw === undefined) return def;
    const value = boolOf(raw);
    if (value === undefined) problems.push(`${name} must be true or false (got "${raw}")`);
    return value ?? def;
  };
  const trustProxy = (name: string): boolean | string[] => {
    const raw = str(name);
    if (raw === undefined) return false;
    const flag = boolOf(raw);
    if (flag !== undefined) return flag;
    const entries = raw.split(',').map((e) => e.trim()).filter(Boolean);
    const bad = entries.filter((e) => {
      const [address, bits, extra] = e.split('/');
      const family = isIP(address ?? '');
      return family === 0 || extra !== undefined || (bits !== undefined && !(/^\d{1,3}$/u.test(bits) && Number(bits) <= (family === 4 ? 32 : 128)));
    });
    if (entries.length === 0 || bad.length > 0) {
      problems.push(`${name} must be true, false, or a comma-separated list of proxy addresses or CIDR ranges (got "${raw}")`);
      return false;
    }
    return entries;
  };
  const oneOf = <T extends string>(name: string, allowed: readonly T[], def: T): T => {
    const raw = str(name);
    if (raw === undefined) return def;
    if (!(allowed as readonly string[]).includes(raw)) {
      problems.push(`${name} must be one of ${allowed.join(', ')} (got "${raw}")`);
      return def;
    }
    return raw as T;
  };
  /** A URL, of one of `schemes` when given; a problem quotes the value without the password it may hold. */
  const url = (name: string, schemes?: readonly string[]): string | undefined => {
    const raw = str(name);
    if (raw === undefined) return undefined;
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      problems.push(`${name} must be a URL (got "${withoutPassword(raw)}")`);
      return undefined;
    }
    if (schemes && !schemes.includes(parsed.protocol)) {
      problems.push(`${name} must be a ${schemes.map((s) => `${s}//`).join(' or ')} URL (got "${withoutPassword(raw)}")`);
      return undefined;
    }
    return raw;
  };

  const nodeEnv = oneOf<NodeEnv>('NODE_ENV', ['development', 'production', 'test'], 'development');
  const production = nodeEnv === 'production';
  const dataDir = resolve(str('DATA_DIR') ?? './data');

  let cloudRevokeUrls = { ...DEFAULT_CLOUD_REVOKE_URLS };
  const cloudRaw = str('CLOUD_REVOKE_URLS');
  if (cloudRaw) {
    try {
      const parsed = JSON.parse(cloudRaw) as unknown;
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
      for (const [k, v] of Object.entries(parsed)) {
        if (typeof v !== 'string') throw new Error(`value of ${k} is not a string`);
        new URL(v);
      }
      cloudRevokeUrls = { ...cloudRevokeUrls, ...(parsed as Record<string, string>) };
    } catch (err) {
      problems.push(`CLOUD_REVOKE_URLS must be a JSON object {provider: url} (${(err as Error).message})`);
    }
  }

  const llmProvider = oneOf('LLM_PROVIDER', ['local', 'openai-compatible'] as const, 'local');
  const llm: LlmConfig = {
    provider: llmProvider,
    baseUrl: url('LLM_BASE_URL'),
    apiKey: str('LLM_API_KEY'),
    model: str('LLM_MODEL'),
    timeoutMs: int('LLM_TIMEOUT_MS', 60_000, 100, 600_000),
    streamMaxMs: int('LLM_STREAM_MAX_MS', DEFAULT_STREAM_MAX_MS, 1_000, 3_600_000),
    maxRetries: int('LLM_MAX_RETRIES', 2, 0, 10),
    maxTokensField: oneOf('LLM_MAX_TOKENS_FIELD', ['auto', 'max_tokens', 'max_completion_tokens'] as const, 'auto'),
  };
  if (llm.provider === 'openai-compatible' && !llm.baseUrl) problems.push('LLM_BASE_URL is required when LLM_PROVIDER=openai-compatible');
  if (llm.provider === 'openai-compatible' && !llm.model) problems.push('LLM_MODEL is required when LLM_PROVIDER=openai-compatible');

  const embeddings: EmbeddingsConfig = {
    provider: oneOf('EMBEDDINGS_PROVIDER', ['local', 'openai-compatible', 'onnx'] as const, 'local'),
    modelPath: str('EMBEDDINGS_MODEL_PATH'),
    baseUrl: url('EMBEDDINGS_BASE_URL'),
    apiKey: str('EMBEDDINGS_API_KEY'),
    model: str('EMBEDDINGS_MODEL'),
    dimensions: int('EMBEDDINGS_DIMENSIONS', 384, 8, 4000),
    localVersion: int('EMBEDDINGS_LOCAL_VERSION', 2, 1, 2) as LocalEmbedderVersion,
    batchSize: int('EMBEDDINGS_BATCH_SIZE', 64, 1, 2048),
    timeoutMs: int('EMBEDDINGS_TIMEOUT_MS', 60_000, 100, 600_000),
    maxRetries: int('EMBEDDINGS_MAX_RETRIES', 2, 0, 10),
  };
  if (embeddings.provider === 'onnx') {
    if (!embeddings.modelPath) problems.push('EMBEDDINGS_MODEL_PATH is required when EMBEDDINGS_PROVIDER=onnx');
    else {
      // the embedder is made at the first search: without this, a bad path only showed as 500s once the server was up
      try {
        findOnnxModelFiles(embeddings.modelPath);
      } catch (err) {
        problems.push((err as Error).message);
      }
    }
  }
  // variables of a provider that is not the one chosen: set, they suggest a *_PROVIDER forgotten (the local models would answer)
  const unused = (names: string[], provider: string, chosen: string) => {
    const set = names.filter((name) => str(name) !== undefined);
    if (set.length > 0) warnings.push(`${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set but not used: ${provider}=${chosen}`);
  };
  if (llm.provider === 'local') unused(['LLM_BASE_URL', 'LLM_API_KEY', 'LLM_MODEL'], 'LLM_PROVIDER', 'local');
  if (embeddings.provider !== 'openai-compatible') unused(['EMBEDDINGS_BASE_URL', 'EMBEDDINGS_API_KEY', 'EMBEDDINGS_MODEL'], 'EMBEDDINGS_PROVIDER', embeddings.provider);
  if (embeddings.provider !== 'onnx') unused(['EMBEDDINGS_MODEL_PATH'], 'EMBEDDINGS_PROVIDER', embeddings.provider);
  if (embeddings.provider === 'openai-compatible') {
    if (!embeddings.baseUrl) problems.push('EMBEDDINGS_BASE_URL is required when EMBEDDINGS_PROVIDER=openai-compatible');
    if (!embeddings.model) problems.push('EMBEDDINGS_MODEL is required when EMBEDDINGS_PROVIDER=openai-compatible');
  }

  const modelPrices: Record<string, ModelPrice> = { '*': { input: 1, output: 2 } };
  const pricesRaw = str('MODEL_PRICES');
  if (pricesRaw) {
    try {
      const parsed = JSON.parse(pricesRaw) as unknown;
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
      for (const [model, price] of Object.entries(parsed as Record<string, unknown>)) {
        const p = price as Record<string, unknown> | null;
        const okNumber = (v: unknown, max: number) => typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= max;
        if (!p || typeof p !== 'object' || !okNumber(p.input, 1e6) || !okNumber(p.output, 1e6) || (p.discount !== undefined && !okNumber(p.discount, 100))) {
          throw new Error(`entry "${model}" must be {"input": n, "output": n, "discount"?: 0..100} with non-negative numbers`);
        }
        modelPrices[model] = { input: p.input as number, output: p.output as number, ...(p.discount !== undefined ? { discount: p.discount as number } : {}) };
      }
    } catch (err) {
      problems.push(`MODEL_PRICES must be a JSON object {"<model>": {"input": n, "output": n}} (${(err as Error).message})`);
    }
  }
  const listOf = (name: string): string[] => {
    const raw = str(name);
    if (raw === undefined) return [];
    try {
      const parsed = JSON.parse(raw) as unknown;
      if (!Array.isArray(parsed) || parsed.some((x) => typeof x !== 'string' || x.trim() === '')) throw new Error('not an array of non-empty strings');
      return parsed as string[];
    } catch (err) {
      problems.push(`${name} must be a JSON array of strings (${(err as Error).message})`);
      return [];
    }
  };
  const filterPatterns = listOf('CONTENT_FILTER_PATTERNS');
  for (const p of filterPatterns) {
    try {
      new RegExp(p, 'iu');
    } catch (err) {
      problems.push(`CONTENT_FILTER_PATTERNS has an invalid regular expression ${JSON.stringify(p)} (${(err as Error).message})`);
    }
  }
  const contentFilter: ContentFilterConfig = {
    terms: listOf('CONTENT_FILTER_TERMS'),
    patterns: filterPatterns,
    patternTimeoutMs: int('CONTENT_FILTER_TIMEOUT_MS', 1_000, 10, 60_000),
    moderationBaseUrl: url('MODERATION_BASE_URL'),
    moderationApiKey: str('MODERATION_API_KEY'),
    moderationModel: str('MODERATION_MODEL') ?? 'omni-moderation-latest',
    moderationTimeoutMs: int('MODERATION_TIMEOUT_MS', 10_000, 100, 120_000),
  };

  const smtpUrl = url('SMTP_URL');
  const bootstrapAdminEmail = str('BOOTSTRAP_ADMIN_EMAIL');
  const bootstrapAdminPassword = str('BOOTSTRAP_ADMIN_PASSWORD');
  if (Boolean(bootstrapAdminEmail) !== Boolean(bootstrapAdminPassword)) {
    problems.push('BOOTSTRAP_ADMIN_EMAIL and BOOTSTRAP_ADMIN_PASSWORD must be set together');
  }
  if (bootstrapAdminPassword && bootstrapAdminPassword.length < 8) problems.push('BOOTSTRAP_ADMIN_PASSWORD must have at least 8 characters');

  const jwtSecret = str('JWT_SECRET');
  const encryptionKey = str('ENCRYPTION_KEY');
  if (production) {
    if (!jwtSecret) problems.push('JWT_SECRET is required when NODE_ENV=production');
    if (!encryptionKey) problems.push('ENCRYPTION_KEY is required when NODE_ENV=production');
  }
  if (jwtSecret && jwtSecret.length < 32) problems.push('JWT_SECRET must have at least 32 characters');
  if (encryptionKey && encryptionKey.length < 32) problems.push('ENCRYPTION_KEY must have at least 32 characters');

  const devOutbox = bool('DEV_OUTBOX', false);
  if (devOutbox && production) problems.push('DEV_OUTBOX=true is not allowed when NODE_ENV=production (the outbox shows MFA codes)');

  const corsOrigins: string[] = [];
  for (const raw of (str('CORS_ORIGINS') ?? '').split(',').map((o) => o.trim()).filter(Boolean)) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(raw);
    } catch {
      parsed = undefined;
    }
    const allowedScheme = parsed && (parsed.protocol === 'https:' || (parsed.protocol === 'http:' && !production));
    if (!parsed || !allowedScheme || parsed.origin !== raw.replace(/\/$/, '')) {
      problems.push(`CORS_ORIGINS must be a comma-separated list of exact origins like https://app.example.com (http: only outside production; no *, paths or wildcards); got "${raw}"`);
      continue;
    }
    corsOrigins.push(parsed.origin);
  }

  const metricsToken = str('METRICS_TOKEN');
  if (metricsToken !== undefined && metricsToken.length < 16) problems.push('METRICS_TOKEN must have at least 16 characters');

  const config: AppConfig = {
    nodeEnv,
    port: int('PORT', 3000, 0, 65535),
    host: str('HOST') ?? '0.0.0.0',
    shutdownTimeoutMs: int('SHUTDOWN_TIMEOUT_MS', 30_000, 1_000, 600_000),
    dataDir,
    databaseUrl: url('DATABASE_URL'),
    redisUrl: url('REDIS_URL', ['redis:', 'rediss:']),
    logLevel: oneOf('LOG_LEVEL', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, nodeEnv === 'test' ? 'silent' : 'info'),
    trustProxy: trustProxy('TRUST_PROXY'),
    jwtSecret: jwtSecret ?? '',
    encryptionKey: encryptionKey ?? '',
    accessTokenTtlSeconds: int('ACCESS_TOKEN_TTL_SECONDS', 900, 30, 86_400),
    refreshTokenTtlSeconds: int('REFRESH_TOKEN_TTL_SECONDS', 30 * 86_400, 300, 365 * 86_400),
    bootstrapAdminEmail,
    bootstrapAdminPassword,
    smtpUrl,
    mailFrom: str('MAIL_FROM') ?? 'Twin Assistant <no-reply@localhost>',
    serviceName: str('SERVICE_NAME') ?? 'Twin Assistant',
    cookieSecure: bool('COOKIE_SECURE', production),
    loginRateLimitPerIp: int('LOGIN_RATE_LIMIT_PER_IP', 30, 1, 100_000),
    loginRateLimitPerEmail: int('LOGIN_RATE_LIMIT_PER_EMAIL', 10, 1, 100_000),
    loginRateLimitWindowSeconds: int('LOGIN_RATE_LIMIT_WINDOW_SECONDS', 900, 1, 86_400),
    mfaChallengesPerWindow: int('MFA_CHALLENGES_PER_15_MIN', 5, 1, 1000),
    searchRateLimitPerMinute: int('SEARCH_RATE_LIMIT_PER_MINUTE', 20, 1, 100_000),
    searchIndexCacheMb: int('SEARCH_INDEX_CACHE_MB', 256, 0, 1_000_000),
    uploadRateLimitPerMinute: int('UPLOAD_RATE_LIMIT_PER_MINUTE', 60, 1, 100_000),
    sanitizeRateLimitPerMinute: int('SANITIZE_RATE_LIMIT_PER_MINUTE', 30, 1, 100_000),
    uploadMaxBytes: int('UPLOAD_MAX_BYTES', 26_214_400, 1, 2 ** 31 - 1),
    ssoTestAllowPrivate: bool('SSO_TEST_ALLOW_PRIVATE', false),
    cloudRevokeUrls,
    ingestWorkers: int('INGEST_WORKERS', 1, 0, 16),
    fileSweepIntervalHours: int('FILE_SWEEP_INTERVAL_HOURS', 6, 0, 168),
    authCacheMaxEntries: int('AUTH_CACHE_MAX_ENTRIES', 10_000, 0, 10_000_000),
    authCacheTtlSeconds: int('AUTH_CACHE_TTL_SECONDS', 60, 0, 86_400),
    pgliteWorker: bool('PGLITE_WORKER', nodeEnv !== 'test'),
    ingest: {
      workerHeapMb: int('INGEST_WORKER_HEAP_MB', 512, 64, 16_384),
      timeoutMs: int('INGEST_TIMEOUT_SECONDS', 120, 1, 3600) * 1000,
      maxInflatedBytes: int('INGEST_MAX_INFLATED_BYTES', 100 * 1024 * 1024, 1024, 2 ** 31 - 1),
      maxCompressionRatio: int('INGEST_MAX_COMPRESSION_RATIO', 100, 2, 100_000),
    },
    personalMaxFiles: int('PERSONAL_MAX_FILES', 1000, 0, 10_000_000),
    personalMaxBytes: int('PERSONAL_MAX_BYTES', 1024 * 1024 * 1024, 0, Number.MAX_SAFE_INTEGER),
    devOutbox,
    passwordCheckRateLimitPerUser: int('PASSWORD_CHECK_RATE_LIMIT_PER_USER', 10, 1, 100_000),
    adminEmailConflictsPerHour: int('ADMIN_EMAIL_CONFLICTS_PER_HOUR', 5, 1, 100_000),
    corsOrigins,
    hstsMaxAgeSeconds: int('HSTS_MAX_AGE_SECONDS', 0, 0, 2 * 365 * 86_400),
    metricsToken,
    llm,
    embeddings,
    modelPrices,
    contentFilter,
    qandaRateLimitPerMinute: int('QANDA_RATE_LIMIT_PER_MINUTE', 60, 1, 1_000_000),
    socketsPerUser: int('SOCKETS_PER_USER', 20, 1, 10_000),
    warnings,
    ...overrides,
  };

  if (problems.length > 0) throw new ConfigError(problems);

  if (!config.jwtSecret || !config.encryptionKey) {
    const secrets = loadOrCreateDevSecrets(config.dataDir);
    config.jwtSecret ||= secrets.jwtSecret;
    config.encryptionKey ||= secrets.encryptionKey;
  }
  return config;
}

/** A URL as it may be quoted in a message: the password of its user part (`//user:password@`) masked. */
function withoutPassword(raw: string): string {
  return raw.replace(/^([^/]*\/\/[^/@:]*:)[^/]*@/u, '$1***@');
}

/** Development secrets live next to the data they protect, so a restart keeps sessions valid. */
function loadOrCreateDevSecrets(dataDir: string): { jwtSecret: string; encryptionKey: string } {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'secrets.json');
  if (existsSync(file)) {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as { jwtSecret?: string; encryptionKey?: string };
    if (parsed.jwtSecret && parsed.encryptionKey) return { jwtSecret: parsed.jwtSecret, encryptionKey: parsed.encryptionKey };
  }
  const secrets = { jwtSecret: randomBytes(48).toString('base64url'), encryptionKey: randomBytes(32).toString('base64url') };
  writeFileSync(file, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  return secrets;
}
