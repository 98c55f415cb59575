/**
 * The world of the authorization matrix (see README.md in this folder): one real app on one restored
 * PGlite, two accounts with institutions, the principals of issue 7 and records in each tenant.
 *
 * The target tenant of every row is account A / institution A1. Everything a row needs to address a
 * real record of it is in `World`; rows that change or delete a record create a fresh one per cell
 * with the `make*` helpers, so that one principal's success never changes what the next one sees.
 */
import type { RouteOptions } from 'fastify';
import type { LightMyRequestResponse } from 'fastify';
import { sql } from 'drizzle-orm';
import { SignJWT } from 'jose';
import type { App } from '../../src/app.js';
import type { Database } from '../../src/db/client.js';
import { insertSession } from '../../src/modules/identity/identity.repository.js';
import { insertDevice } from '../../src/modules/mfa/mfa.repository.js';
import { ingestUpload } from '../../src/modules/vault/ingest/pipeline.js';
import { DEFAULT_EXTRACT_LIMITS } from '../../src/modules/vault/ingest/extract.js';
import { prepareDocument, type PrepareTask } from '../../src/modules/vault/ingest/prepare.js';
import { createBlobStorage } from '../../src/providers/storage/index.js';
import { newId, newPublicId } from '../../src/shared/ids.js';
import { insertAccount, insertInstitution, insertUser, upsertMembership } from '../../src/modules/tenancy/tenancy.repository.js';
import { hashPassword } from '../../src/modules/identity/passwords.js';
import { PASSWORD, startTestApp, type TestApp } from '../support/app.js';
import { multipartBody } from '../support/uploads.js';

// ───────────── principals ─────────────

/** Every principal of issue 7 (plus the account admin of the target account), in the order of the report. */
export const PRINCIPALS = [
  'anonymous',
  'garbage',
  'expired',
  'revoked',
  'otherAccountUser',
  'otherInstitutionMember',
  'member',
  'institutionAdmin',
  'accountAdmin',
  'otherAccountAdmin',
  'superadmin',
] as const;
export type PrincipalName = (typeof PRINCIPALS)[number];

/** The principals that hold a valid session (everyone but the four bad tokens). */
export type RealPrincipal = Exclude<PrincipalName, 'anonymous' | 'garbage' | 'expired' | 'revoked'>;
export const AUTHENTICATED = PRINCIPALS.slice(4) as readonly RealPrincipal[];

export const PRINCIPAL_NOTES: Record<PrincipalName, string> = {
  anonymous: 'no token',
  garbage: 'a well-formed JWT of the member signed with another key',
  expired: 'a correctly signed access token of the member, expired an hour ago (its session is alive)',
  revoked: 'an access token of the member whose session was ended by POST /api/auth/logout',
  otherAccountUser: 'plain member of B1 in account B',
  otherInstitutionMember: 'plain member of A2, the other institution of account A',
  member: 'plain member of A1 (owner of the target vault records)',
  institutionAdmin: 'admin of A1 (role admin on the membership; global role user)',
  accountAdmin: 'account admin of account A, enrolled nowhere',
  otherAccountAdmin: 'account admin of account B, enrolled nowhere',
  superadmin: 'superadmin of a separate platform account, enrolled nowhere',
};

/** Expected status per principal. */
export type Expect = Record<PrincipalName, number>;

/** All four bad tokens answer 401 on an authenticated route; give the seven real principals. */
export function authed(statuses: Record<RealPrincipal, number>): Expect {
  return { anonymous: 401, garbage: 401, expired: 401, revoked: 401, ...statuses };
}

/** The same status for every principal (public routes: the token, good or bad, changes nothing). */
export function everyone(status: number): Expect {
  return Object.fromEntries(PRINCIPALS.map((p) => [p, status])) as Expect;
}

/** An authenticated route that every real principal uses on its own records with the same answer. */
export function ownRecords(status: number): Expect {
  return authed({ otherAccountUser: status, otherInstitutionMember: status, member: status, institutionAdmin: status, accountAdmin: status, otherAccountAdmin: status, superadmin: status });
}

// ───────────── rows ─────────────

export type Method = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';

export interface MatrixRequest {
  /** Values of the path parameters of the route template (`:id` → params.id). */
  params?: Record<string, string>;
  query?: Record<string, string>;
  /** A JSON body (object) or raw bytes (with headers['content-type']). */
  payload?: unknown;
  headers?: Record<string, string>;
  /** Use this access token instead of the principal's usual one (e.g. a fresh session to log out). */
  token?: string | null;
}

export interface Cell {
  w: World;
  principal: PrincipalName;
  /** The expected status of this cell: rows that create records on success may build differently. */
  expected: number;
}

export interface Row {
  /** Method and url template exactly as registered, e.g. `GET /api/admin/account/:id`. */
  route: string;
  /** Several rows may cover one route with different targets (personal file, account-scope file, ...). */
  variant?: string;
  expect: Expect;
  /**
   * Cells whose expectation is what issue 7 requires but today's code does not do yet (a fix in flight
   * on another branch). They are reported as TODO with the reason and not counted as failures.
   */
  todo?: Partial<Record<PrincipalName, string>>;
  request(cell: Cell): MatrixRequest | Promise<MatrixRequest>;
  /** Extra assertions on the answer of a cell (throw to fail). */
  check?(res: LightMyRequestResponse, cell: Cell): void | Promise<void>;
  /** Why the cross-tenant marker check does not apply (e.g. the body logs in as the member, whoever calls). */
  noLeakCheck?: string;
  /** The route writes even when it refuses (e.g. a failed attempt is counted): skip the no-change check. */
  writesOnRefusal?: string;
}

// ───────────── the world ─────────────

/** Markers written into tenant A's records: no answer to a principal outside may ever contain them. */
export const CANARY_A = 'CanaryAcctA7q';
/** Marker of A1's instance and personal vault records: no answer to a member of A2 may contain it. */
export const CANARY_A1 = 'CanaryInstA1x';

type UserRow = Awaited<ReturnType<typeof insertUser>>;

export interface World {
  t: TestApp;
  app: App;
  database: Database;
  /** Every route of the app as registered: method (one per entry) and url template, with its schema. */
  routes: Array<{ method: string; url: string; schema?: RouteOptions['schema'] }>;
  accountA: { id: string };
  accountB: { id: string };
  platform: { id: string };
  a1: { id: string; publicId: string };
  a2: { id: string; publicId: string };
  b1: { id: string; publicId: string };
  users: Record<RealPrincipal, UserRow>;
  /** A plain member of A1 that no principal is: target of the admin user routes. */
  targetUser: UserRow;
  tokens: Record<PrincipalName, string | null>;
  records: {
    /** Instance file of A1 owned by the member, ingested (active, with chunks). */
    fileA1: { id: string; chunkId: string };
    /** The member's personal file, ingested. */
    personalFile: { id: string; chunkId: string };
    /** Account-scope file of account A uploaded by the member (through A1), ingested. */
    accountFile: { id: string; chunkId: string };
    /** Instance file of B1 owned by the other account's user. */
    fileB1: { id: string };
    /** Instance collection of A1 created by the member. */
    collectionA1: { id: string };
    personalCollection: { id: string };
    /** A trusted device of the member. */
    deviceOfMember: { id: string };
  };
  /** Headers carrying the principal's token (none for anonymous). */
  headersFor(principal: PrincipalName, token?: string | null): Record<string, string>;
  /** A new login session of a principal's user: its access and refresh tokens. */
  sessionFor(principal: PrincipalName): Promise<{ accessToken: string; refreshToken: string; sessionId: string }>;
  makeAccount(name?: string): Promise<{ id: string }>;
  makeInstitution(accountId: string, fields?: Record<string, unknown>): Promise<{ id: string; publicId: string }>;
  makeUser(accountId: string, memberships?: Record<string, 'admin' | 'user'>, fields?: Record<string, unknown>): Promise<UserRow>;
  /** Uploads a small text file through the API as the principal; `ingest` runs the real pipeline on it. */
  makeFile(principal: PrincipalName, fields: Record<string, string>, options?: { ingest?: boolean; text?: string }): Promise<{ id: string; chunkId?: string }>;
  makeCollection(principal: PrincipalName, body: Record<string, unknown>): Promise<{ id: string }>;
  makeDevice(userId: string): Promise<{ id: string }>;
  /**
   * The position in the write log (a trigger on every table logs each row inserted, deleted or
   * actually changed, volatile columns left out): a refused write must leave nothing after it.
   */
  writeMark(): Promise<number>;
  /** The tables written since a mark. */
  writesSince(mark: number): Promise<string[]>;
  close(): Promise<void>;
}

/** Columns that legitimately change without a write by the request under test. */
const VOLATILE_COLUMNS: Record<string, string[]> = {
  // Written at most once a minute by authentication itself, not by the route.
  sessions: ['last_activity_at'],
};

export interface WorldOptions {
  env?: Record<string, string>;
}

export async function buildWorld(options: WorldOptions = {}): Promise<World> {
  const routes: World['routes'] = [];
  const t = await startTestApp({
    env: {
      // Ingestion is driven by the fixture (below): no background worker writes while cells run.
      INGEST_WORKERS: '0',
      LOGIN_RATE_LIMIT_PER_IP: '100000',
      LOGIN_RATE_LIMIT_PER_EMAIL: '100000',
      UPLOAD_RATE_LIMIT_PER_MINUTE: '100000',
      SANITIZE_RATE_LIMIT_PER_MINUTE: '100000',
      DEV_OUTBOX: 'true',
      METRICS_TOKEN: 'matrix-metrics-token-0123456789abcdef',
      ...options.env,
    },
    build: {
      onRoute: (route) => {
        for (const method of [route.method].flat()) routes.push({ method, url: route.url, schema: route.schema });
      },
    },
  });
  const { app, database } = t;
  const db = database.db;
  const now = () => new Date();
  const passwordHash = await hashPassword(PASSWORD);

  const makeAccount = async (name = `Account ${newId().slice(-6)}`) => insertAccount(db, { id: newId(), name });
  const makeInstitution = async (accountId: string, fields: Record<string, unknown> = {}) =>
    insertInstitution(db, { id: newId(), accountId, publicId: newPublicId(), name: `Institution ${newId().slice(-6)}`, ainame: 'Ada', ...fields });
  const makeUser = async (accountId: string, memberships: Record<string, 'admin' | 'user'> = {}, fields: Record<string, unknown> = {}) => {
    const entries = Object.entries(memberships);
    const user = await insertUser(db, {
      id: newId(),
      accountId,
      email: `u-${newId().slice(-12)}@matrix.test`,
      passwordHash,
      fname: 'Matrix',
      lname: 'User',
      role: 'user',
      currentInstitutionId: entries[0]?.[0] ?? null,
      ...fields,
    });
    for (const [institutionId, role] of entries) await upsertMembership(db, user.id, institutionId, role);
    return user;
  };

  const accountA = await makeAccount(`Acme ${CANARY_A}`);
  const accountB = await makeAccount('Beta College');
  const platform = await makeAccount('Platform');
  const a1 = await makeInstitution(accountA.id, { name: `Acme Physics ${CANARY_A} ${CANARY_A1}` });
  const a2 = await makeInstitution(accountA.id, { name: `Acme History ${CANARY_A}` });
  const b1 = await makeInstitution(accountB.id, { name: 'Beta Law' });

  const users: World['users'] = {
    otherAccountUser: await makeUser(accountB.id, { [b1.id]: 'user' }),
    otherInstitutionMember: await makeUser(accountA.id, { [a2.id]: 'user' }, { fname: CANARY_A }),
    member: await makeUser(accountA.id, { [a1.id]: 'user' }, { fname: `${CANARY_A} ${CANARY_A1}` }),
    institutionAdmin: await makeUser(accountA.id, { [a1.id]: 'admin' }, { fname: `${CANARY_A} ${CANARY_A1}` }),
    accountAdmin: await makeUser(accountA.id, {}, { role: 'accountadmin', fname: CANARY_A }),
    otherAccountAdmin: await makeUser(accountB.id, {}, { role: 'accountadmin' }),
    superadmin: await makeUser(platform.id, {}, { role: 'superadmin' }),
  };
  const targetUser = await makeUser(accountA.id, { [a1.id]: 'user' }, { fname: `${CANARY_A} ${CANARY_A1}` });

  const userOf = (p: PrincipalName): UserRow => {
    if (p === 'garbage' || p === 'expired' || p === 'revoked') return users.member;
    if (p === 'anonymous') throw new Error('anonymous has no user');
    return users[p];
  };

  /** A session as a login opens it (current institution: the first enrolment), without the password hash cost. */
  const openSession = async (user: UserRow, at = now()) => {
    const sessionId = newId();
    const refresh = t.app.ctx.tokens.newRefresh(sessionId);
    await insertSession(db, {
      id: sessionId,
      userId: user.id,
      accountId: user.accountId,
      institutionId: user.currentInstitutionId,
      refreshHash: refresh.hash,
      ip: '127.0.0.1',
      ua: 'authz-matrix',
      createdAt: at,
      lastActivityAt: at,
      expiresAt: new Date(at.getTime() + 86_400_000),
    });
    const accessToken = await t.app.ctx.tokens.signAccess({ userId: user.id, sessionId, institutionId: user.currentInstitutionId }, at);
    return { accessToken, refreshToken: refresh.token, sessionId };
  };

  const tokens = {} as Record<PrincipalName, string | null>;
  tokens.anonymous = null;
  for (const p of AUTHENTICATED) tokens[p] = (await openSession(userOf(p))).accessToken;
  {
    const member = users.member;
    const live = await openSession(member);
    tokens.garbage = await new SignJWT({ sid: live.sessionId, inst: member.currentInstitutionId, typ: 'access' })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(member.id)
      .setIssuedAt()
      .setExpirationTime('15m')
      .sign(new TextEncoder().encode('another-key-another-key-another-key-0123'));
    // Signed an hour and a half ago with the real key: the 15-minute token expired an hour ago.
    const old = new Date(Date.now() - 90 * 60_000);
    tokens.expired = await t.app.ctx.tokens.signAccess({ userId: member.id, sessionId: live.sessionId, institutionId: member.currentInstitutionId }, old);
    const ended = await openSession(member);
    const out = await app.inject({ method: 'POST', url: '/api/auth/logout', headers: { authorization: `Bearer ${ended.accessToken}` } });
    if (out.statusCode !== 200) throw new Error(`logout for the revoked principal failed: ${out.statusCode} ${out.body}`);
    tokens.revoked = ended.accessToken;
  }

  const headersFor = (principal: PrincipalName, token?: string | null): Record<string, string> => {
    const value = token === undefined ? tokens[principal] : token;
    if (!value) return {};
    // Both headers are accepted everywhere: alternate them over the principals.
    return PRINCIPALS.indexOf(principal) % 2 === 0 ? { authorization: `Bearer ${value}` } : { 'x-access-token': value };
  };

  const storage = createBlobStorage(t.config);
  const ingestDeps = {
    db,
    storage,
    embedder: () => t.app.ctx.providers.embedder,
    config: t.config,
    clock: t.app.ctx.clock,
    log: t.app.log,
    singleConnection: database.kind === 'pglite',
    // the fixture's own small files: prepared in this process (the sandbox process is proven elsewhere)
    prepare: (task: PrepareTask) => prepareDocument(task),
    limits: DEFAULT_EXTRACT_LIMITS,
  };

  const makeFile: World['makeFile'] = async (principal, fields, opts = {}) => {
    const text = opts.text ?? `Notes ${CANARY_A} ${CANARY_A1}. The speed of light is constant in every inertial frame.\n\nSecond paragraph about optics.`;
    const { payload, contentType } = await multipartBody(fields, { name: 'notes.txt', content: text, type: 'text/plain' });
    const res = await app.inject({ method: 'POST', url: '/api/user/files', headers: { ...headersFor(principal), 'content-type': contentType }, payload });
    if (res.statusCode !== 201) throw new Error(`fixture upload as ${principal} failed: ${res.statusCode} ${res.body}`);
    const id = res.json().data._id as string;
    if (!opts.ingest) return { id };
    const outcome = await ingestUpload(ingestDeps, id);
    const rows = await database.db.execute(sql`select id from chunks where upload_id = ${id} order by chunk_index limit 1`);
    const chunkId = (rows as unknown as { rows: Array<{ id: string }> }).rows[0]?.id;
    if (!chunkId) throw new Error(`fixture file ${id} has no chunk after ingestion: ${JSON.stringify(outcome)}`);
    return { id, chunkId };
  };

  const makeCollection: World['makeCollection'] = async (principal, body) => {
    const res = await app.inject({ method: 'POST', url: '/api/user/collection', headers: headersFor(principal), payload: body });
    if (res.statusCode !== 201) throw new Error(`fixture collection as ${principal} failed: ${res.statusCode} ${res.body}`);
    return { id: res.json().data._id as string };
  };

  const makeDevice = async (userId: string) => {
    const at = now();
    const row = await insertDevice(db, {
      id: newId(),
      userId,
      deviceId: newId(),
      secretHash: newId() + newId(),
      sourceIp: '127.0.0.1',
      ua: 'authz-matrix',
      createdAt: at,
      lastUsedAt: at,
      expiresAt: new Date(at.getTime() + 7 * 86_400_000),
    });
    return { id: row.id };
  };

  const fileA1 = await makeFile('member', { scope: 'instance', institution: a1.id, file_title: `Physics ${CANARY_A1}` }, { ingest: true });
  const personalFile = await makeFile('member', { scope: 'personal', file_title: `Mine ${CANARY_A1}` }, { ingest: true });
  const accountFile = await makeFile('member', { scope: 'account', institution: a1.id, file_title: `Shared ${CANARY_A}` }, { ingest: true, text: `Shared handbook ${CANARY_A}. Every member of the account reads it.` });
  const fileB1 = await makeFile('otherAccountUser', { scope: 'instance', institution: b1.id, file_title: 'Beta file' }, { ingest: false });
  const collectionA1 = await makeCollection('member', { name: `Lectures ${CANARY_A1}`, scope: 'instance', institution: a1.id });
  const personalCollection = await makeCollection('member', { name: `Private ${CANARY_A1}`, scope: 'personal' });
  const deviceOfMember = await makeDevice(users.member.id);

  // The background move of staged vectors into the HNSW index writes chunk_vectors(_staged) whenever it
  // runs, whatever request is in flight: it is stopped here, so every write the log records is a request's.
  // Staged vectors stay staged (searches compare them exactly).
  await app.ctx.vectorDrain.stop();

  // The write log: a row trigger on every table of the public schema records each inserted, deleted
  // or actually changed row (an UPDATE that leaves a row as it was is no change; volatile columns are
  // left out). It is transactional: what a refused request rolled back leaves no trace.
  const tableRows = (await database.db.execute(
    sql`select table_name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE' order by table_name`,
  )) as unknown as { rows: Array<{ table_name: string }> };
  await database.db.execute(sql.raw(`create table matrix_write_log (id bigserial primary key, tbl text not null)`));
  await database.db.execute(
    sql.raw(`create function matrix_log_write() returns trigger language plpgsql as $$ begin insert into matrix_write_log (tbl) values (TG_TABLE_NAME); return null; end $$`),
  );
  for (const { table_name: name } of tableRows.rows) {
    const drop = VOLATILE_COLUMNS[name] ?? [];
    const changed = drop.length
      ? `(to_jsonb(old) - array[${drop.map((c) => `'${c}'`).join(',')}]::text[]) is distinct from (to_jsonb(new) - array[${drop.map((c) => `'${c}'`).join(',')}]::text[])`
      : 'old.* is distinct from new.*';
    await database.db.execute(sql.raw(`create trigger matrix_w1 after insert or delete on "${name}" for each row execute function matrix_log_write()`));
    await database.db.execute(sql.raw(`create trigger matrix_w2 after update on "${name}" for each row when (${changed}) execute function matrix_log_write()`));
  }
  const writeMark = async () => {
    const res = (await database.db.execute(sql`select coalesce(max(id), 0)::text as id from matrix_write_log`)) as unknown as { rows: Array<{ id: string }> };
    return Number(res.rows[0]!.id);
  };
  const writesSince = async (mark: number) => {
    const res = (await database.db.execute(sql`select distinct tbl from matrix_write_log where id > ${mark} order by tbl`)) as unknown as { rows: Array<{ tbl: string }> };
    return res.rows.map((r) => r.tbl);
  };
  return {
    t,
    app,
    database,
    routes,
    accountA,
    accountB,
    platform,
    a1,
    a2,
    b1,
    users,
    targetUser,
    tokens,
    records: { fileA1: { id: fileA1.id, chunkId: fileA1.chunkId! }, personalFile: { id: personalFile.id, chunkId: personalFile.chunkId! }, accountFile: { id: accountFile.id, chunkId: accountFile.chunkId! }, fileB1, collectionA1, personalCollection, deviceOfMember },
    headersFor,
    sessionFor: (p) => openSession(userOf(p)),
    makeAccount: makeAccount,
    makeInstitution: makeInstitution,
    makeUser: makeUser,
    makeFile: makeFile,
    makeCollection: makeCollection,
    makeDevice: makeDevice,
    writeMark,
    writesSince,
    close: () => t.close(),
  };
}
