import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  customType,
  index,
  integer,
  jsonb,
  numeric,
  pgSequence,
  pgTable,
  primaryKey,
  type AnyPgColumn,
  text,
  timestamp,
  uniqueIndex,
  uuid,
  vector,
} from 'drizzle-orm/pg-core';

/** Dimension of the chunk embedding column; the re-embed CLI alters it when the embedder changes. */
export const DEFAULT_EMBEDDING_DIMENSIONS = 384;

const tsvector = customType<{ data: string }>({ dataType: () => 'tsvector' });

const id = () => text('id').primaryKey();
const created = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow();
const updated = () => timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow();
const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });
/** Credits are exact decimals: they change only by atomic SQL arithmetic. */
const credits = (name: string) => numeric(name, { precision: 20, scale: 4, mode: 'number' }).notNull().default(0);
const strings = (name: string) => text(name).array().notNull().default(sql`'{}'::text[]`);

// ───────────────────────────── tenancy ─────────────────────────────

export const accounts = pgTable(
  'accounts',
  {
    id: id(),
    name: text('name').notNull(),
    managerEmail: text('manager_email'),
    status: text('status').notNull().default('active'),
    lastActivityAt: ts('last_activity_at'),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [index('accounts_name_trgm').using('gin', sql`translate(lower(${t.name}), 'ς', 'σ') gin_trgm_ops`)],
);

export const institutions = pgTable(
  'institutions',
  {
    id: id(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    publicId: uuid('public_id').notNull().unique(),
    name: text('name').notNull(),
    ainame: text('ainame').notNull(),
    about: text('about').notNull().default(''),
    picture: text('picture').notNull().default(''),
    pictureBg: text('picture_bg').notNull().default(''),
    pictureDarkBg: text('picture_dark_bg').notNull().default(''),
    pictureAnimated: text('picture_animated').notNull().default(''),
    voiceAgentId: text('voice_agent_id').notNull().default(''),
    credits: credits('credits'),
    creditsUsed: credits('credits_used'),
    creditAward: credits('credit_award'),
    maxCompletionTokens: integer('max_completion_tokens').notNull().default(1024),
    maxFiles: integer('max_files').notNull().default(1000),
    status: text('status').notNull().default('active'),
    allowJoining: text('allow_joining').notNull().default('none'),
    questionType: text('question_type').notNull().default('default'),
    rtVoice: text('rt_voice').notNull().default(''),
    joiningAdminOnly: boolean('joining_admin_only').notNull().default(false),
    poolCredits: boolean('pool_credits').notNull().default(true),
    disableFileUploadForUser: boolean('disable_file_upload_for_user').notNull().default(false),
    personalisationAsked: boolean('personalisation_asked').notNull().default(false),
    locationEnabled: boolean('location_enabled').notNull().default(false),
    rtEnabled: boolean('rt_enabled').notNull().default(false),
    rtAdminOnly: boolean('rt_admin_only').notNull().default(false),
    displayAgentDetails: boolean('display_agent_details').notNull().default(false),
    disableAssistantsForUser: boolean('disable_assistants_for_user').notNull().default(false),
    publicAuthorizedUrls: strings('public_authorized_urls'),
    invoicesUrls: strings('invoices_urls'),
    toolsDisabled: strings('tools_disabled'),
    ltiContextIds: strings('lti_context_ids'),
    assistantsDisabled: strings('assistants_disabled'),
    contactEmail: text('contact_email').notNull().default(''),
    /** Per-institution model overrides (summary model for sanitize, conversation model). */
    summaryModel: text('summary_model'),
    conversationModel: text('conversation_model'),
    /** Third-party cloud tokens, encrypted at rest: {cloudprovider: {provider, accessToken(enc), ...}}. */
    cloudServices: jsonb('cloud_services').$type<Record<string, unknown>>().notNull().default({}),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [index('institutions_account_idx').on(t.accountId), index('institutions_lti_idx').using('gin', t.ltiContextIds)],
);

export const users = pgTable(
  'users',
  {
    id: id(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    email: text('email').notNull(),
    passwordHash: text('password_hash').notNull(),
    fname: text('fname').notNull().default(''),
    lname: text('lname').notNull().default(''),
    location: text('location').notNull().default(''),
    timezone: text('timezone').notNull().default('UTC'),
    /** Global or account-level role: superadmin | accountadmin | user. Institution roles live on memberships. */
    role: text('role').notNull().default('user'),
    status: text('status').notNull().default('active'),
    credits: credits('credits'),
    creditsUsed: credits('credits_used'),
    /** MFA state machine: off → pending (enabled, not verified) → enrolled. */
    mfaState: text('mfa_state').notNull().default('off'),
    currentInstitutionId: text('current_institution_id').references(() => institutions.id, { onDelete: 'set null' }),
    lastLoginAt: ts('last_login_at'),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [uniqueIndex('users_email_lower_uq').on(sql`lower(${t.email})`), index('users_account_idx').on(t.accountId)],
);

export const memberships = pgTable(
  'memberships',
  {
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id')
      .notNull()
      .references(() => institutions.id, { onDelete: 'cascade' }),
    /** Institution role: admin | user. */
    role: text('role').notNull().default('user'),
    createdAt: created(),
  },
  (t) => [primaryKey({ columns: [t.userId, t.institutionId] }), index('memberships_institution_idx').on(t.institutionId)],
);

// ───────────────────────────── identity ─────────────────────────────

/** A login session; its refresh token rotates, and reuse of an old one revokes the session. */
export const sessions = pgTable(
  'sessions',
  {
    id: id(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    accountId: text('account_id').notNull(),
    institutionId: text('institution_id'),
    refreshHash: text('refresh_hash').notNull(),
    /** The hash the last rotation replaced: presenting it again is reuse of a once-valid token (revokes). */
    previousRefreshHash: text('previous_refresh_hash'),
    ip: text('ip').notNull().default(''),
    ua: text('ua').notNull().default(''),
    createdAt: created(),
    lastActivityAt: timestamp('last_activity_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    revokedAt: ts('revoked_at'),
    revokedReason: text('revoked_reason'),
  },
  (t) => [index('sessions_user_idx').on(t.userId), index('sessions_created_idx').on(t.createdAt)],
);

export const mfaChallenges = pgTable(
  'mfa_challenges',
  {
    id: id(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    /** enroll | login */
    purpose: text('purpose').notNull(),
    codeHash: text('code_hash').notNull(),
    attempts: integer('attempts').notNull().default(0),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    consumedAt: ts('consumed_at'),
    ip: text('ip').notNull().default(''),
    ua: text('ua').notNull().default(''),
    createdAt: created(),
  },
  (t) => [index('mfa_challenges_user_created_idx').on(t.userId, t.createdAt)],
);

export const trustedDevices = pgTable(
  'trusted_devices',
  {
    id: id(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    deviceId: text('device_id').notNull(),
    secretHash: text('secret_hash').notNull().unique(),
    sourceIp: text('source_ip').notNull().default(''),
    ua: text('ua').notNull().default(''),
    createdAt: created(),
    lastUsedAt: timestamp('last_used_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    revokedAt: ts('revoked_at'),
  },
  (t) => [index('trusted_devices_user_idx').on(t.userId)],
);

/** Development mail outbox (no SMTP configured). */
export const mailOutbox = pgTable('mail_outbox', {
  id: id(),
  to: text('to').notNull(),
  subject: text('subject').notNull(),
  text: text('text').notNull(),
  html: text('html'),
  createdAt: created(),
});

// ───────────────────────────── vault ─────────────────────────────

export const collections = pgTable(
  'collections',
  {
    id: id(),
    name: text('name').notNull(),
    color: text('color'),
    /** personal | instance | account */
    scope: text('scope').notNull(),
    /** Deleting a collection moves its content to its parent first; SET NULL is the backstop (vault root). */
    parentId: text('parent_id').references((): AnyPgColumn => collections.id, { onDelete: 'set null' }),
    ownerUserId: text('owner_user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id').references(() => institutions.id, { onDelete: 'cascade' }),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [index('collections_parent_idx').on(t.parentId), index('collections_scope_idx').on(t.accountId, t.scope, t.institutionId)],
);

export const uploads = pgTable(
  'uploads',
  {
    id: id(),
    originalname: text('originalname').notNull(),
    filesize: bigint('filesize', { mode: 'number' }).notNull(),
    mimetype: text('mimetype').notNull(),
    fileTitle: text('file_title').notNull().default(''),
    /** personal | instance | account */
    scope: text('scope').notNull(),
    ownerUserId: text('owner_user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id').references(() => institutions.id, { onDelete: 'cascade' }),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    collectionId: text('collection_id').references(() => collections.id, { onDelete: 'set null' }),
    isPrivate: boolean('is_private').notNull().default(false),
    confidential: boolean('confidential').notNull().default(false),
    /** active | inactive | selected | error | deleted, plus processing while ingestion runs. */
    status: text('status').notNull().default('processing'),
    errorMessage: text('error_message'),
    chunkCount: integer('chunk_count').notNull().default(0),
    /** Ingestion progress 0..100 and the stage it is in (queued, extracting, chunking, embedding, indexing, done). */
    progress: integer('progress').notNull().default(0),
    stage: text('stage').notNull().default('queued'),
    pages: integer('pages'),
    tokensUsed: bigint('tokens_used', { mode: 'number' }).notNull().default(0),
    /** Tokens in the extracted text (sum of chunk tokens). */
    textTokens: integer('text_tokens').notNull().default(0),
    storageKey: text('storage_key').notNull(),
    sha256: text('sha256').notNull(),
    embeddingModel: text('embedding_model'),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [
    index('uploads_scope_idx').on(t.accountId, t.scope, t.institutionId),
    index('uploads_owner_idx').on(t.ownerUserId),
    index('uploads_collection_idx').on(t.collectionId),
    index('uploads_name_trgm').using('gin', sql`translate(lower(${t.originalname}), 'ς', 'σ') gin_trgm_ops`),
    // the sweep of stored files asks which of a page of storage keys an upload references (vault/orphan-files.ts)
    index('uploads_storage_key_idx').on(t.storageKey),
  ],
);

export const chunks = pgTable(
  'chunks',
  {
    id: id(),
    uploadId: text('upload_id')
      .notNull()
      .references(() => uploads.id, { onDelete: 'cascade' }),
    chunkIndex: integer('chunk_index').notNull(),
    text: text('text').notNull(),
    heading: text('heading'),
    tokens: integer('tokens').notNull(),
    tsv: tsvector('tsv'),
    /** BM25 document length: lexemes in tsv counted with repetition (search module). */
    lexLen: integer('lex_len').notNull().default(0),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [
    uniqueIndex('chunks_upload_index_uq').on(t.uploadId, t.chunkIndex),
    index('chunks_tsv_gin').using('gin', t.tsv),
  ],
);

/** The columns of both vector tables: a chunk's vector and, for the scope filter of a search, its upload. */
const chunkVectorColumns = () => ({
  chunkId: text('chunk_id')
    .primaryKey()
    .references(() => chunks.id, { onDelete: 'cascade' }),
  uploadId: text('upload_id').notNull(),
  embedding: vector('embedding', { dimensions: DEFAULT_EMBEDDING_DIMENSIONS }).notNull(),
});

/**
 * Each chunk's vector, in the table the HNSW index covers. Ingestion does not write here: it stages the
 * vectors (chunk_vectors_staged) and a background drain moves them in small batches (search/vector-drain.ts),
 * because an incremental HNSW insert costs 3–7 ms a row on the embedded engine. A chunk edit and a
 * re-embed write here directly.
 */
export const chunkVectors = pgTable(
  'chunk_vectors',
  chunkVectorColumns(),
  (t) => [index('chunk_vectors_hnsw').using('hnsw', t.embedding.op('vector_cosine_ops')), index('chunk_vectors_upload_idx').on(t.uploadId)],
);

/**
 * Vectors written by ingestion and not yet in the HNSW index. A search compares the query with every
 * staged vector of its scope exactly, so a file is fully searchable as soon as it is active; a chunk's
 * vector is in exactly one of the two tables.
 */
export const chunkVectorsStaged = pgTable('chunk_vectors_staged', chunkVectorColumns(), (t) => [index('chunk_vectors_staged_upload_idx').on(t.uploadId)]);

// ───────────────────────────── platform ─────────────────────────────

/** Durable background jobs; workers claim with FOR UPDATE SKIP LOCKED so several nodes can share the queue. */
export const jobs = pgTable(
  'jobs',
  {
    id: id(),
    queue: text('queue').notNull(),
    payload: jsonb('payload').$type<Record<string, unknown>>().notNull(),
    /** pending | running | done | failed */
    status: text('status').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    maxAttempts: integer('max_attempts').notNull().default(3),
    runAt: timestamp('run_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    lockedAt: ts('locked_at'),
    lockedBy: text('locked_by'),
    lastError: text('last_error'),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [index('jobs_claim_idx').on(t.queue, t.status, t.runAt)],
);

/** Small key/value facts about this database (e.g. which embedder wrote the stored vectors). */
export const systemState = pgTable('system_state', {
  key: text('key').primaryKey(),
  value: jsonb('value').notNull(),
  updatedAt: updated(),
});

// ───────────────────────────── credits ─────────────────────────────

/**
 * Every movement of credits is one row here, written in the same transaction as the atomic balance
 * change it records, so any balance can be re-derived: balance = sum(delta) of its rows.
 * One of userId / institutionId names the balance that moved while that holder exists; neither after it was
 * deleted (migration 0012: the rows stay with the account).
 * kind: opening (balance found when the ledger was introduced) | topup (superadmin mint) |
 * transfer_out / transfer_in (an admin moves credits it holds) | award (creditAward on first enrolment) |
 * reserve / release / charge (Q&A: reservation of the maximum, release of the rest) | correction |
 * closed (the balance a deleted holder still had, taken off with it; ref_id = the holder's id).
 */
export const creditLedger = pgTable(
  'credit_ledger',
  {
    id: id(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    /** the holder (a user's or an institution's balance); null once the holder is deleted: its history stays */
    userId: text('user_id').references(() => users.id, { onDelete: 'set null' }),
    institutionId: text('institution_id').references(() => institutions.id, { onDelete: 'set null' }),
    delta: numeric('delta', { precision: 20, scale: 4, mode: 'number' }).notNull(),
    kind: text('kind').notNull(),
    /** Who caused it (admin for top-ups and transfers, the asking user for Q&A). */
    actorUserId: text('actor_user_id'),
    /** What it belongs to: a history record, a transfer pair, a request id. */
    refId: text('ref_id'),
    note: text('note'),
    createdAt: created(),
  },
  (t) => [
    index('credit_ledger_user_idx').on(t.userId, t.createdAt),
    index('credit_ledger_institution_idx').on(t.institutionId, t.createdAt),
    index('credit_ledger_ref_idx').on(t.refId),
  ],
);

/**
 * Model tokens counted on an upload (its tokens_used: AI sanitize of its chunks), one row per addition, written by
 * the statement that adds them (vault/chunks.repository.ts addTokensUsed): who used how many, on which chunk, with
 * which model, when. The counter is the sum of its rows.
 */
export const uploadTokenLedger = pgTable(
  'upload_token_ledger',
  {
    id: id(),
    uploadId: text('upload_id')
      .notNull()
      .references(() => uploads.id, { onDelete: 'cascade' }),
    chunkId: text('chunk_id'),
    /** who asked (null once that user is deleted: the row stays with its file) */
    userId: text('user_id').references(() => users.id, { onDelete: 'set null' }),
    tokens: integer('tokens').notNull(),
    kind: text('kind').notNull(),
    model: text('model'),
    createdAt: created(),
  },
  (t) => [index('upload_token_ledger_upload_idx').on(t.uploadId, t.createdAt)],
);

/**
 * The Q&A reservations not yet settled, one row per request (its ref_id, the history id): written by the
 * statement that reserves (and grows with each tool round), deleted by the statement that settles, so a
 * reservation is settled at most once, and one left by a process that died is found and released by the
 * reservation sweep (conversation/credits.repository.ts).
 */
export const creditReservations = pgTable(
  'credit_reservations',
  {
    refId: text('ref_id').primaryKey(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    /** the payer: the user's own balance, or the institution's pool */
    userId: text('user_id').references(() => users.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id').references(() => institutions.id, { onDelete: 'cascade' }),
    actorUserId: text('actor_user_id').notNull(),
    amount: numeric('amount', { precision: 20, scale: 4, mode: 'number' }).notNull(),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [index('credit_reservations_updated_idx').on(t.updatedAt)],
);

/**
 * Idempotency keys (the `Idempotency-Key` header of the Q&A endpoints and the credit movements): a key a
 * user sent is claimed by one request; its successful response is kept with it, in the commit that makes
 * its effect, and a retry with the same key and the same request gets that response again instead of
 * acting twice. A request that fails gives its key back; one whose holder stops renewing its lease (its process died)
 * is taken over by a retry. Kept 24 hours (platform/idempotency.ts).
 */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    key: text('key').notNull(),
    /** SHA-256 of the request as the key first saw it (route, target, body; not transport details) */
    fingerprint: text('fingerprint').notNull(),
    /** the response of the request that claimed the key; null while it runs */
    response: jsonb('response'),
    /**
     * The request holding the claim (a Q&A request's history id, the ref_id of its credit reservation): only it may
     * renew, complete or release the claim. Null on claims made before leases.
     */
    holder: text('holder'),
    /**
     * Until when the running claim is held: its holder renews it while it runs; once it has lapsed (the holder went
     * silent: its process died) a retry takes the key over. Null once completed, and on claims made before leases.
     */
    leaseUntil: ts('lease_until'),
    createdAt: created(),
  },
  (t) => [primaryKey({ columns: [t.userId, t.key] }), index('idempotency_keys_created_idx').on(t.createdAt)],
);

/** A user's creditAward from an institution is paid once per (user, institution), ever: the primary key enforces it. */
export const creditAwards = pgTable(
  'credit_awards',
  {
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id')
      .notNull()
      .references(() => institutions.id, { onDelete: 'cascade' }),
    amount: numeric('amount', { precision: 20, scale: 4, mode: 'number' }).notNull(),
    createdAt: created(),
  },
  (t) => [primaryKey({ columns: [t.userId, t.institutionId] })],
);

// ───────────────────────────── search: BM25 statistics and the knowledge graph ─────────────────────────────
// Owned by src/modules/search/search.repository.ts. Every row hangs off an upload (or a chunk) with
// ON DELETE CASCADE, so it is scoped exactly like its upload and leaves with it.

/** Versions of upload indexes: every refresh of an upload's derived rows takes a new value (never reused). */
export const uploadIndexVersion = pgSequence('upload_index_version');

/**
 * Per-upload BM25 statistics: indexed chunks and the sum of their lex_len (avgdl of a scope = Σlex / Σchunks).
 * `version` changes in the transaction that changes the upload's chunks, mentions or graph rows: a cached
 * copy of the upload's index (search/segments.ts) is valid while its version is the one stored here.
 */
export const uploadIndexStats = pgTable('upload_index_stats', {
  uploadId: text('upload_id')
    .primaryKey()
    .references(() => uploads.id, { onDelete: 'cascade' }),
  chunks: integer('chunks').notNull().default(0),
  lexLen: bigint('lex_len', { mode: 'number' }).notNull().default(0),
  version: bigint('version', { mode: 'number' })
    .notNull()
    .default(sql`nextval('upload_index_version')`),
});

/**
 * Entities of one upload (normalised name), with the number of its chunks that mention them. Graph rows
 * (here and kg_edge_lists) are tens a chunk: a foreign-key check on each cost as much as the row itself (half
 * of writing a large file's graph on the embedded engine), so upload_id has none. Its rows follow their
 * upload instead by a trigger on uploads (deleted with it, however it is deleted: migration 0014) and
 * by the writers themselves (search.repository removeUploadIndex; ingestion of a file that is gone).
 */
export const kgEntities = pgTable(
  'kg_entities',
  {
    uploadId: text('upload_id').notNull(),
    name: text('name').notNull(),
    /** name | acronym | quantity | phrase */
    kind: text('kind').notNull(),
    chunkCount: integer('chunk_count').notNull(),
  },
  // read by upload only (search/segments.ts matches names in memory): no index on name
  (t) => [primaryKey({ columns: [t.uploadId, t.name] })],
);

/**
 * Entity → chunk mentions, one row per chunk: its entities in order of salience (the first EDGE_RANK
 * make its co-occurrence edges), their kinds and their counts in the chunk, as parallel arrays. One row
 * a chunk instead of one a mention: ~46 rows a chunk cost the embedded engine 2 ms a chunk to insert.
 */
export const kgMentions = pgTable(
  'kg_mentions',
  {
    chunkId: text('chunk_id')
      .primaryKey()
      .references(() => chunks.id, { onDelete: 'cascade' }),
    uploadId: text('upload_id').notNull(),
    names: text('names').array().notNull(),
    kinds: text('kinds').array().notNull(),
    tf: integer('tf').array().notNull(),
  },
  (t) => [index('kg_mentions_upload_idx').on(t.uploadId)],
);

/**
 * Weighted co-occurrence edges between entities of one upload (a < b in code point order; weight = chunks
 * where both are salient), as one row per entity a: its neighbours b (in code point order) and their
 * weights. A 10 MB file has ~180,000 edges and ~7,500 such lists; a row per edge cost the embedded engine
 * ~7 µs each to insert (its primary-key entry), a fifth of indexing the file. The view kg_edges shows one
 * row per edge (upload_id, a, b, weight). upload_id: see kgEntities.
 */
export const kgEdgeLists = pgTable(
  'kg_edge_lists',
  {
    uploadId: text('upload_id').notNull(),
    a: text('a').notNull(),
    bs: text('bs').array().notNull(),
    ws: integer('ws').array().notNull(),
  },
  (t) => [primaryKey({ columns: [t.uploadId, t.a] })],
);

// ───────────── hardening (issue 7) ─────────────

/**
 * Which institution an LTI context id maps to: the primary key makes a context id belong to one
 * institution across every tenant. Kept in the same transaction as `institutions.lti_context_ids`,
 * which stays the list the API shows.
 */
export const institutionLtiContexts = pgTable(
  'institution_lti_contexts',
  {
    contextId: text('context_id').primaryKey(),
    institutionId: text('institution_id')
      .notNull()
      .references(() => institutions.id, { onDelete: 'cascade' }),
  },
  (t) => [index('institution_lti_contexts_institution_idx').on(t.institutionId)],
);

// ───────────── memory, settings, SSO providers (issue 10: rest engineer) ─────────────

/**
 * Memory parameters: key/value records with a namespace. A personal row (shared false) has no
 * institution and is seen only by its author; a shared row belongs to one institution and is read by
 * its members (contract §7).
 */
export const memoryParams = pgTable(
  'memory_params',
  {
    id: id(),
    authorUserId: text('author_user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id').references(() => institutions.id, { onDelete: 'cascade' }),
    keyName: text('key_name').notNull(),
    keyValue: text('key_value').notNull(),
    keyDescription: text('key_description').notNull().default(''),
    keyNamespace: text('key_namespace').notNull().default('default'),
    shared: boolean('shared').notNull().default(false),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [
    index('memory_params_author_idx').on(t.authorUserId, t.createdAt),
    index('memory_params_institution_idx').on(t.institutionId, t.createdAt),
  ],
);

/** Settings (instance variables): `key` is unique within an institution, enforced by the index. */
export const settings = pgTable(
  'settings',
  {
    id: id(),
    institutionId: text('institution_id')
      .notNull()
      .references(() => institutions.id, { onDelete: 'cascade' }),
    userId: text('user_id').references(() => users.id, { onDelete: 'set null' }),
    key: text('key').notNull(),
    value: text('value'),
    status: text('status').notNull().default('active'),
    adminOnly: boolean('admin_only').notNull().default(false),
    institutionShared: boolean('institution_shared').notNull().default(true),
    editableOthers: boolean('editable_others').notNull().default(false),
    /** The spec's `__v`: incremented by every update, in the UPDATE statement itself. */
    version: integer('version').notNull().default(0),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [uniqueIndex('settings_institution_key_uq').on(t.institutionId, t.key)],
);

/** SSO identity providers of an account; the client secret is stored sealed (AES-256-GCM). */
export const ssoProviders = pgTable(
  'sso_providers',
  {
    id: id(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    /** oidc | oauth2 */
    type: text('type').notNull(),
    issuer: text('issuer').notNull(),
    tokenEndpoint: text('token_endpoint').notNull(),
    clientId: text('client_id').notNull(),
    clientSecretSealed: text('client_secret_sealed'),
    createdBy: text('created_by').references(() => users.id, { onDelete: 'set null' }),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [index('sso_providers_account_idx').on(t.accountId)],
);

// ───────────────────────────── conversation (assistants, history records) ─────────────────────────────

/**
 * An assistant: instructions and retrieval scope for Q&A. It belongs to an account and, unless
 * personal, to one institution. `ownerUserId` null marks a system assistant (no owner: created by
 * an admin or seed-demo). Visibility: see conversation/conversation.policy.ts.
 */
export const assistants = pgTable(
  'assistants',
  {
    id: id(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id').references(() => institutions.id, { onDelete: 'cascade' }),
    /** The owner's assistants go with the owner (ON DELETE CASCADE): null must keep meaning "system". */
    ownerUserId: text('owner_user_id').references(() => users.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    instructions: text('instructions').notNull().default(''),
    pictureUrl: text('picture_url').notNull().default(''),
    likedCount: integer('liked_count').notNull().default(0),
    rememberHistory: integer('remember_history').notNull().default(1),
    historyCount: integer('history_count').notNull().default(5),
    adminOnly: boolean('admin_only').notNull().default(false),
    institutionShared: boolean('institution_shared').notNull().default(false),
    editableOthers: boolean('editable_others').notNull().default(false),
    argument1: text('argument_1').notNull().default(''),
    argument2: text('argument_2').notNull().default(''),
    argument3: text('argument_3').notNull().default(''),
    argument4: text('argument_4').notNull().default(''),
    argument5: text('argument_5').notNull().default(''),
    ragCollections: strings('rag_collections'),
    assistantToolMode: text('assistant_tool_mode').notNull().default('none'),
    assistantTools: jsonb('assistant_tools').$type<Array<{ tool: string; instructionsOverride: string }>>().notNull().default([]),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [
    index('assistants_institution_idx').on(t.institutionId),
    index('assistants_account_idx').on(t.accountId),
    index('assistants_owner_idx').on(t.ownerUserId),
  ],
);

/** One like per (assistant, user): the primary key makes a second like a no-op. */
export const assistantLikes = pgTable(
  'assistant_likes',
  {
    assistantId: text('assistant_id')
      .notNull()
      .references(() => assistants.id, { onDelete: 'cascade' }),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    createdAt: created(),
  },
  (t) => [primaryKey({ columns: [t.assistantId, t.userId] })],
);

/**
 * A conversation turn (the spec's History record), written by the Q&A pipeline whether it
 * succeeded or not. `institutionId` null: asked in the personal space.
 */
export const histories = pgTable(
  'histories',
  {
    id: id(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    institutionId: text('institution_id').references(() => institutions.id, { onDelete: 'cascade' }),
    assistantId: text('assistant_id').references(() => assistants.id, { onDelete: 'set null' }),
    courseId: bigint('course_id', { mode: 'number' }),
    courseName: text('course_name'),
    /** The client's request id (epoch ms). */
    requestId: bigint('request_id', { mode: 'number' }),
    input: text('input').notNull().default(''),
    inputs: strings('inputs'),
    outputs: strings('outputs'),
    /** Tool calls of the turn: [{tool, arguments, response}]. */
    toolCalls: jsonb('tool_calls').$type<Array<{ tool: string; arguments: unknown; response: string }>>().notNull().default([]),
    credits: numeric('credits', { precision: 20, scale: 4, mode: 'number' }).notNull().default(0),
    usage: integer('usage').notNull().default(0),
    discount: numeric('discount', { precision: 7, scale: 4, mode: 'number' }).notNull().default(0),
    favorite: boolean('favorite').notNull().default(false),
    forgotten: boolean('forgotten').notNull().default(false),
    roleId: text('role_id').notNull().default(''),
    roleName: text('role_name').notNull().default(''),
    /** up | down | null */
    thumbUpDown: text('thumb_up_down'),
    feedback: text('feedback'),
    conversationModel: text('conversation_model').notNull().default(''),
    success: boolean('success').notNull(),
    errorCode: text('error_code'),
    errorMessage: text('error_message'),
    experimental: boolean('experimental').notNull().default(false),
    promptMode: text('prompt_mode').notNull().default('classic'),
    streamed: boolean('streamed').notNull().default(false),
    streamingFailed: boolean('streaming_failed').notNull().default(false),
    queryDurationMs: integer('query_duration_ms').notNull().default(0),
    createdAt: created(),
    updatedAt: updated(),
  },
  (t) => [
    index('histories_user_created_idx').on(t.userId, t.createdAt),
    index('histories_thread_idx').on(t.userId, t.institutionId, t.courseId, t.createdAt),
    index('histories_institution_created_idx').on(t.institutionId, t.createdAt),
    index('histories_feedback_idx').on(t.accountId, t.createdAt).where(sql`thumb_up_down is not null or feedback is not null`),
  ],
);
