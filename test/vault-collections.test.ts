import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../src/db/client.js';
import { uploads } from '../src/db/schema.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;
type Scope = 'personal' | 'instance' | 'account';

describe('vault collections and select-all-ids', () => {
  let t: TestApp;
  let w: World;
  /** access tokens by user name */
  const tok: Record<string, string> = {};
  let userA1b: Awaited<ReturnType<typeof makeUser>>;

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '1000' } });
    w = await makeWorld(t.database);
    userA1b = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    for (const [name, user] of Object.entries({ userA1: w.userA1, userA1b, adminA1: w.adminA1, userA2: w.userA2, userB1: w.userB1, accountAdminA: w.accountAdminA })) {
      tok[name] = (await login(t.app, user.email)).accessToken;
    }
  });
  after(() => t.close());

  // ───── helpers ─────

  const call = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, who: string, payload?: unknown) =>
    t.app.inject({ method, url, headers: bearer(tok[who]!), ...(payload !== undefined ? { payload: payload as object } : {}) });

  async function createCollection(who: string, body: Record<string, unknown>) {
    const res = await call('POST', '/api/user/collection', who, body);
    assert.equal(res.statusCode, 201, res.body);
    return res.json().data as { _id: string; name: string; scope: Scope; parent: string | null; institution: string | null; fileCount: number };
  }

  /** Inserts an upload row directly (no ingestion), owned by `owner`, placed as given. */
  async function makeUpload(fields: {
    owner: { id: string; accountId: string };
    scope: Scope;
    institutionId?: string | null;
    accountId?: string;
    collectionId?: string | null;
    originalname?: string;
    status?: string;
    isPrivate?: boolean;
  }) {
    const id = newId();
    await t.database.db.insert(uploads).values({
      id,
      originalname: fields.originalname ?? `file-${id.slice(-6)}.txt`,
      filesize: 10,
      mimetype: 'text/plain',
      scope: fields.scope,
      ownerUserId: fields.owner.id,
      institutionId: fields.scope === 'personal' ? null : (fields.institutionId ?? null),
      accountId: fields.accountId ?? fields.owner.accountId,
      collectionId: fields.collectionId ?? null,
      isPrivate: fields.isPrivate ?? false,
      status: fields.status ?? 'active',
      storageKey: `test/${id}`,
      sha256: '0'.repeat(64),
    });
    return id;
  }

  const selectAll = (who: string, body: Record<string, unknown>) => call('POST', '/api/user/collections/select-all-ids', who, body);

  // ───── create ─────

  test('create: 201 with the collection; defaults to instance scope in the current institution', async () => {
    const res = await call('POST', '/api/user/collection', 'userA1', { name: '  Lectures  ', color: '#A0b1C2' });
    assert.equal(res.statusCode, 201);
    const body = res.json();
    assert.equal(body.success, true);
    const c = body.data;
    assert.deepEqual(Object.keys(c).sort(), ['_id', 'account_shared', 'color', 'created', 'fileCount', 'institution', 'name', 'parent', 'scope', 'updated'].sort());
    assert.equal(c.name, 'Lectures');
    assert.equal(c.color, '#A0b1C2');
    assert.equal(c.scope, 'instance');
    assert.equal(c.institution, w.a1.id);
    assert.equal(c.parent, null);
    assert.equal(c.account_shared, false);
    assert.equal(c.fileCount, 0);
    assert.ok(!Number.isNaN(Date.parse(c.created)));
    // it is stored as such
    const [row] = await rowsOf<{ owner_user_id: string; account_id: string; scope: string }>(t.database.db, sql`select * from collections where id = ${c._id}`);
    assert.equal(row?.owner_user_id, w.userA1.id);
    assert.equal(row?.account_id, w.accountA.id);
    // the x-access-token header works too
    const viaCustom = await t.app.inject({ method: 'GET', url: `/api/user/collection/${c._id}`, headers: { 'x-access-token': tok.userA1! } });
    assert.equal(viaCustom.statusCode, 200);
    assert.equal(viaCustom.json().data._id, c._id);
  });

  test('create: account_shared true means scope account; personal scope has no institution', async () => {
    const shared = await createCollection('userA1', { name: 'Shared', account_shared: true });
    assert.equal(shared.scope, 'account');
    assert.equal((shared as any).account_shared, true);
    assert.equal(shared.institution, w.a1.id);
    const mine = await createCollection('userA1', { name: 'Mine', scope: 'personal' });
    assert.equal(mine.scope, 'personal');
    assert.equal(mine.institution, null);
    const explicitAccount = await createCollection('userA1', { name: 'Acct', scope: 'account' });
    assert.equal((explicitAccount as any).account_shared, true);
    // contradicting fields
    const bad = await call('POST', '/api/user/collection', 'userA1', { name: 'x', account_shared: true, scope: 'personal' });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.code, 'VALIDATION_FAILED');
    assert.equal(bad.json().error.details[0].field, 'account_shared');
  });

  test('create: institution must be one of mine (403); the explicit one wins over the current one', async () => {
    const foreign = await call('POST', '/api/user/collection', 'userA1', { name: 'x', institution: w.b1.id });
    assert.equal(foreign.statusCode, 403);
    assert.equal(foreign.json().error.code, 'FORBIDDEN');
    const multi = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    const token = (await login(t.app, multi.email)).accessToken;
    const res = await t.app.inject({ method: 'POST', url: '/api/user/collection', headers: bearer(token), payload: { name: 'In A2', institution: w.a2.id } });
    assert.equal(res.statusCode, 201);
    assert.equal(res.json().data.institution, w.a2.id);
    assert.equal(res.json().data.scope, 'instance');
  });

  test('create: validation failures answer the contract body', async () => {
    const badColour = await call('POST', '/api/user/collection', 'userA1', { name: 'x', color: 'red' });
    assert.equal(badColour.statusCode, 400);
    assert.deepEqual(badColour.json(), {
      success: false,
      message: 'Invalid request: color must match pattern "^#[0-9a-fA-F]{6}$"',
      error: { code: 'VALIDATION_FAILED', details: [{ field: 'color', location: 'body', message: 'color must match pattern "^#[0-9a-fA-F]{6}$"' }] },
    });
    for (const color of ['#12345', '#1234567', '123456', '#12345g']) {
      assert.equal((await call('POST', '/api/user/collection', 'userA1', { name: 'x', color })).statusCode, 400, color);
    }
    const empty = await call('POST', '/api/user/collection', 'userA1', { name: '' });
    assert.deepEqual(empty.json(), {
      success: false,
      message: 'Invalid request: name must NOT have fewer than 1 characters',
      error: { code: 'VALIDATION_FAILED', details: [{ field: 'name', location: 'body', message: 'name must NOT have fewer than 1 characters' }] },
    });
    const blank = await call('POST', '/api/user/collection', 'userA1', { name: '    ' });
    assert.equal(blank.statusCode, 400);
    assert.equal(blank.json().error.details[0].field, 'name');
    const missing = await call('POST', '/api/user/collection', 'userA1', { color: '#000000' });
    assert.equal(missing.statusCode, 400);
    assert.deepEqual(missing.json().error.details[0], { field: 'name', location: 'body', message: "name must have required property 'name'" });
    const wrongType = await call('POST', '/api/user/collection', 'userA1', { name: 42 });
    assert.deepEqual(wrongType.json(), {
      success: false,
      message: 'Invalid request: name must be string',
      error: { code: 'VALIDATION_FAILED', details: [{ field: 'name', location: 'body', message: 'name must be string' }] },
    });
    const sharedNotBool = await call('POST', '/api/user/collection', 'userA1', { name: 'x', account_shared: 'yes' });
    assert.equal(sharedNotBool.statusCode, 400);
    assert.equal(sharedNotBool.json().error.details[0].field, 'account_shared');
    const tooLong = await call('POST', '/api/user/collection', 'userA1', { name: 'x'.repeat(201) });
    assert.equal(tooLong.statusCode, 400);
    assert.equal((await call('POST', '/api/user/collection', 'userA1', { name: 'x'.repeat(200) })).statusCode, 201);
    const badScope = await call('POST', '/api/user/collection', 'userA1', { name: 'x', scope: 'world' });
    assert.equal(badScope.statusCode, 400);
    assert.equal(badScope.json().error.details[0].field, 'scope');
    const badParent = await call('POST', '/api/user/collection', 'userA1', { name: 'x', parent: 'not-an-id' });
    assert.equal(badParent.statusCode, 400);
    assert.equal(badParent.json().error.details[0].field, 'parent');
    const noAuth = await t.app.inject({ method: 'POST', url: '/api/user/collection', payload: { name: 'x' } });
    assert.equal(noAuth.statusCode, 401);
    assert.equal(noAuth.json().error.code, 'UNAUTHENTICATED');
  });

  // ───── nesting, listing ─────

  test('nesting: a child inherits its parent scope; parents must be visible and of the same scope', async () => {
    const root = await createCollection('userA1', { name: 'Root', scope: 'personal' });
    const child = await createCollection('userA1', { name: 'Child', parent: root._id });
    assert.equal(child.scope, 'personal');
    assert.equal(child.parent, root._id);
    const grandchild = await createCollection('userA1', { name: 'Grandchild', parent: child._id, scope: 'personal' });
    assert.equal(grandchild.parent, child._id);

    // other scope than the parent
    const mismatch = await call('POST', '/api/user/collection', 'userA1', { name: 'x', parent: root._id, scope: 'instance' });
    assert.equal(mismatch.statusCode, 400);
    assert.equal(mismatch.json().error.details[0].field, 'parent');
    const mismatchShared = await call('POST', '/api/user/collection', 'userA1', { name: 'x', parent: root._id, account_shared: true });
    assert.equal(mismatchShared.statusCode, 400);
    // someone else's personal collection, an unknown id: 404
    assert.equal((await call('POST', '/api/user/collection', 'userA1b', { name: 'x', parent: root._id })).statusCode, 404);
    const unknown = await call('POST', '/api/user/collection', 'userA1', { name: 'x', parent: newId() });
    assert.equal(unknown.statusCode, 404);
    assert.equal(unknown.json().error.code, 'NOT_FOUND');

    // an instance parent of A1, an explicit other institution: 400
    const inst = await createCollection('userA1', { name: 'Inst' });
    const multi = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    const mt = (await login(t.app, multi.email)).accessToken;
    const cross = await t.app.inject({ method: 'POST', url: '/api/user/collection', headers: bearer(mt), payload: { name: 'x', parent: inst._id, institution: w.a2.id } });
    assert.equal(cross.statusCode, 400);
    assert.equal(cross.json().error.details[0].field, 'institution');
    // another member of A1 may add a sub-collection to an instance collection
    const sub = await createCollection('userA1b', { name: 'Sub by colleague', parent: inst._id });
    assert.equal(sub.scope, 'instance');
    assert.equal(sub.institution, w.a1.id);

    // listing one level
    const level = await call('GET', `/api/user/collections?parent=${root._id}`, 'userA1');
    assert.equal(level.statusCode, 200);
    assert.deepEqual(level.json().data.map((c: any) => c._id), [child._id]);
    const personalRoots = await call('GET', '/api/user/collections?scope=personal', 'userA1');
    const ids = personalRoots.json().data.map((c: any) => c._id);
    assert.ok(ids.includes(root._id));
    assert.ok(!ids.includes(child._id));
    assert.ok(personalRoots.json().data.every((c: any) => c.scope === 'personal' && c.parent === null));
    // listing the children of a collection I cannot see: 404
    assert.equal((await call('GET', `/api/user/collections?parent=${root._id}`, 'userA1b')).statusCode, 404);
    // without a scope: personal + current institution + its account
    const all = (await call('GET', '/api/user/collections', 'userA1')).json().data as Array<{ scope: string }>;
    assert.deepEqual([...new Set(all.map((c) => c.scope))].sort(), ['account', 'instance', 'personal']);
    // invalid query values
    assert.equal((await call('GET', '/api/user/collections?scope=nope', 'userA1')).statusCode, 400);
    assert.equal((await call('GET', '/api/user/collections?parent=123', 'userA1')).statusCode, 400);
  });

  // ───── update ─────

  test('patch: rename, recolour, clear colour', async () => {
    const c = await createCollection('userA1', { name: 'Old', color: '#000000', scope: 'personal' });
    const res = await call('PATCH', `/api/user/collection/${c._id}`, 'userA1', { name: ' New ', color: '#ffffff' });
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().data.name, 'New');
    assert.equal(res.json().data.color, '#ffffff');
    const cleared = await call('PATCH', `/api/user/collection/${c._id}`, 'userA1', { color: null });
    assert.equal(cleared.json().data.color, null);
    assert.equal(cleared.json().data.name, 'New');
    const bad = await call('PATCH', `/api/user/collection/${c._id}`, 'userA1', { color: '#fff' });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.details[0].field, 'color');
    assert.equal((await call('PATCH', `/api/user/collection/${c._id}`, 'userA1', { name: '' })).statusCode, 400);
  });

  test('patch: moves stay in the scope and never create a cycle', async () => {
    const a = await createCollection('userA1', { name: 'A', scope: 'personal' });
    const b = await createCollection('userA1', { name: 'B', parent: a._id });
    const c = await createCollection('userA1', { name: 'C', parent: b._id });
    const other = await createCollection('userA1', { name: 'Other', scope: 'personal' });
    const inst = await createCollection('userA1', { name: 'Inst', scope: 'instance' });

    for (const target of [a._id, b._id, c._id]) {
      const res = await call('PATCH', `/api/user/collection/${a._id}`, 'userA1', { parent: target });
      assert.equal(res.statusCode, 400, `move A under ${target}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().error.details[0].field, 'parent');
    }
    const crossScope = await call('PATCH', `/api/user/collection/${b._id}`, 'userA1', { parent: inst._id });
    assert.equal(crossScope.statusCode, 400);
    // nothing moved
    const [row] = await rowsOf<{ parent_id: string | null }>(t.database.db, sql`select parent_id from collections where id = ${a._id}`);
    assert.equal(row?.parent_id, null);

    // a legal move, then to the root
    const moved = await call('PATCH', `/api/user/collection/${b._id}`, 'userA1', { parent: other._id });
    assert.equal(moved.statusCode, 200);
    assert.equal(moved.json().data.parent, other._id);
    // now A may go under C? C is under B under Other, not under A any more: allowed
    const aUnderC = await call('PATCH', `/api/user/collection/${a._id}`, 'userA1', { parent: c._id });
    assert.equal(aUnderC.statusCode, 200);
    const toRoot = await call('PATCH', `/api/user/collection/${a._id}`, 'userA1', { parent: null });
    assert.equal(toRoot.json().data.parent, null);
    // a parent I cannot see
    const foreign = await createCollection('userB1', { name: 'Foreign', scope: 'personal' });
    assert.equal((await call('PATCH', `/api/user/collection/${a._id}`, 'userA1', { parent: foreign._id })).statusCode, 404);
  });

  test('patch: instance collections in another institution are not a valid parent', async () => {
    const multi = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
    const mt = (await login(t.app, multi.email)).accessToken;
    const mk = async (body: object) => (await t.app.inject({ method: 'POST', url: '/api/user/collection', headers: bearer(mt), payload: body })).json().data;
    const inA1 = await mk({ name: 'in a1', institution: w.a1.id });
    const inA2 = await mk({ name: 'in a2', institution: w.a2.id });
    const res = await t.app.inject({ method: 'PATCH', url: `/api/user/collection/${inA1._id}`, headers: bearer(mt), payload: { parent: inA2._id } });
    assert.equal(res.statusCode, 400);
  });

  test('patch and delete: only the owner or a vault admin of the institution/account', async () => {
    const byUser = await createCollection('userA1', { name: 'Team folder' });
    // a colleague sees it but may not change it
    assert.equal((await call('GET', `/api/user/collection/${byUser._id}`, 'userA1b')).statusCode, 200);
    const colleague = await call('PATCH', `/api/user/collection/${byUser._id}`, 'userA1b', { name: 'mine now' });
    assert.equal(colleague.statusCode, 403);
    assert.equal(colleague.json().error.code, 'FORBIDDEN');
    assert.equal((await call('DELETE', `/api/user/collection/${byUser._id}`, 'userA1b')).statusCode, 403);
    // the institution admin may
    const admin = await call('PATCH', `/api/user/collection/${byUser._id}`, 'adminA1', { name: 'Renamed by admin' });
    assert.equal(admin.statusCode, 200);
    assert.equal(admin.json().data.name, 'Renamed by admin');
    // account-shared: the account admin may change it
    const shared = await createCollection('userA2', { name: 'Account folder', account_shared: true });
    assert.equal((await call('PATCH', `/api/user/collection/${shared._id}`, 'userA1', { name: 'no' })).statusCode, 403);
    assert.equal((await call('PATCH', `/api/user/collection/${shared._id}`, 'accountAdminA', { color: '#123456' })).statusCode, 200);
    // an institution admin of the account administers its institution, not what the whole account shares
    const instAdmin = await call('PATCH', `/api/user/collection/${shared._id}`, 'adminA1', { name: 'no' });
    assert.equal(instAdmin.statusCode, 403);
    assert.equal((await call('DELETE', `/api/user/collection/${shared._id}`, 'adminA1')).statusCode, 403);
    assert.equal((await call('GET', `/api/user/collection/${shared._id}`, 'adminA1')).json().data.name, 'Account folder');
  });

  test('invisible names: format characters (Cf) are stripped; a name of nothing visible is refused', async () => {
    for (const name of ['\u200b', '\u200b\u200d\u2060', ' \ufeff ', '\u202e']) {
      const res = await call('POST', '/api/user/collection', 'userA1', { name, scope: 'personal' });
      assert.equal(res.statusCode, 400, `${JSON.stringify(name)}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().error.details[0].field, 'name');
    }
    const c = await createCollection('userA1', { name: '\u202eFol\u200bder\u2066 ', scope: 'personal' });
    assert.equal(c.name, 'Folder');
    const invisible = await call('PATCH', `/api/user/collection/${c._id}`, 'userA1', { name: '\u200b' });
    assert.equal(invisible.statusCode, 400, invisible.body);
    assert.equal(invisible.json().error.details[0].field, 'name');
    const renamed = await call('PATCH', `/api/user/collection/${c._id}`, 'userA1', { name: 'Re\u200bnamed' });
    assert.equal(renamed.json().data.name, 'Renamed');
  });

  test('an account admin without any enrolment moderates the account-shared collections of its own account only', async () => {
    const unenrolled = await makeUser(t.database, { accountId: w.accountA.id, role: 'accountadmin' });
    tok.unenrolledAdminA = (await login(t.app, unenrolled.email)).accessToken;
    const shared = await createCollection('userA2', { name: 'Shared by A2', account_shared: true });
    const instance = await createCollection('userA1', { name: 'Instance of A1', scope: 'instance' });
    const personal = await createCollection('userA1', { name: 'Personal of A1', scope: 'personal' });
    const ofB = await createCollection('userB1', { name: 'Shared by B1', account_shared: true });
    assert.equal((await call('GET', `/api/user/collection/${shared._id}`, 'unenrolledAdminA')).statusCode, 200);
    const renamed = await call('PATCH', `/api/user/collection/${shared._id}`, 'unenrolledAdminA', { name: 'Moderated' });
    assert.equal(renamed.statusCode, 200, renamed.body);
    assert.equal(renamed.json().data.name, 'Moderated');
    // its reading is not widened beyond the account-shared records of its account
    for (const c of [instance, personal, ofB]) {
      assert.equal((await call('GET', `/api/user/collection/${c._id}`, 'unenrolledAdminA')).statusCode, 404, c.name);
      assert.equal((await call('PATCH', `/api/user/collection/${c._id}`, 'unenrolledAdminA', { name: 'no' })).statusCode, 404, c.name);
    }
    assert.equal((await call('DELETE', `/api/user/collection/${shared._id}`, 'unenrolledAdminA')).statusCode, 200);
    assert.equal((await call('GET', `/api/user/collection/${shared._id}`, 'userA2')).statusCode, 404);
  });

  // ───── delete ─────

  test('delete: files and sub-collections move to the parent, in one go', async () => {
    const top = await createCollection('userA1', { name: 'Top', scope: 'personal' });
    const mid = await createCollection('userA1', { name: 'Mid', parent: top._id });
    const sub1 = await createCollection('userA1', { name: 'Sub1', parent: mid._id });
    const sub2 = await createCollection('userA1', { name: 'Sub2', parent: mid._id });
    const deep = await createCollection('userA1', { name: 'Deep', parent: sub1._id });
    const f1 = await makeUpload({ owner: w.userA1, scope: 'personal', collectionId: mid._id });
    const f2 = await makeUpload({ owner: w.userA1, scope: 'personal', collectionId: mid._id, status: 'deleted' });
    const fDeep = await makeUpload({ owner: w.userA1, scope: 'personal', collectionId: deep._id });

    const res = await call('DELETE', `/api/user/collection/${mid._id}`, 'userA1');
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { success: true, message: 'Collection deleted', data: { _id: mid._id, movedTo: top._id, movedFiles: 2, movedCollections: 2 } });
    assert.equal((await call('GET', `/api/user/collection/${mid._id}`, 'userA1')).statusCode, 404);
    const files = await rowsOf<{ id: string; collection_id: string | null }>(t.database.db, sql`select id, collection_id from uploads where id in (${f1}, ${f2}, ${fDeep})`);
    const byId = Object.fromEntries(files.map((f) => [f.id, f.collection_id]));
    assert.equal(byId[f1], top._id);
    assert.equal(byId[f2], top._id);
    assert.equal(byId[fDeep], deep._id);
    const kids = (await call('GET', `/api/user/collections?parent=${top._id}`, 'userA1')).json().data.map((c: any) => c._id).sort();
    assert.deepEqual(kids, [sub1._id, sub2._id].sort());
    assert.equal((await call('GET', `/api/user/collection/${deep._id}`, 'userA1')).json().data.parent, sub1._id);
    assert.equal((await call('GET', `/api/user/collection/${top._id}`, 'userA1')).json().data.fileCount, 1, 'the deleted file is not counted');

    // a root collection: its content goes to the vault root
    const rootRes = await call('DELETE', `/api/user/collection/${top._id}`, 'userA1');
    assert.equal(rootRes.json().data.movedTo, null);
    const [f] = await rowsOf<{ collection_id: string | null }>(t.database.db, sql`select collection_id from uploads where id = ${f1}`);
    assert.equal(f?.collection_id, null);
    const [s] = await rowsOf<{ parent_id: string | null }>(t.database.db, sql`select parent_id from collections where id = ${sub1._id}`);
    assert.equal(s?.parent_id, null);
    assert.equal((await call('DELETE', `/api/user/collection/${top._id}`, 'userA1')).statusCode, 404);
  });

  test("delete: another member's private files move too, and movedFiles counts only what the caller sees", async () => {
    const shared = await createCollection('userA1', { name: 'Shared shelf', scope: 'instance', institution: w.a1.id });
    const own = await makeUpload({ owner: w.userA1, scope: 'instance', institutionId: w.a1.id, collectionId: shared._id });
    const theirs = await makeUpload({ owner: userA1b, scope: 'instance', institutionId: w.a1.id, collectionId: shared._id, isPrivate: true });
    const res = await call('DELETE', `/api/user/collection/${shared._id}`, 'userA1');
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json().data, { _id: shared._id, movedTo: null, movedFiles: 1, movedCollections: 0 });
    const moved = await rowsOf<{ collection_id: string | null }>(t.database.db, sql`select collection_id from uploads where id in (${own}, ${theirs})`);
    assert.deepEqual(moved.map((f) => f.collection_id), [null, null]);
  });

  test('foreign keys: files and sub-collections never point at a collection that is gone', async () => {
    const top = await createCollection('userA1', { name: 'FK top', scope: 'personal' });
    const sub = await createCollection('userA1', { name: 'FK sub', parent: top._id });
    const file = await makeUpload({ owner: w.userA1, scope: 'personal', collectionId: top._id });
    // a delete that bypasses the service (an operator's SQL, an account removed...): the references go to the root
    await t.database.db.execute(sql`delete from collections where id = ${top._id}`);
    const [f] = await rowsOf<{ collection_id: string | null }>(t.database.db, sql`select collection_id from uploads where id = ${file}`);
    assert.equal(f!.collection_id, null);
    const [c] = await rowsOf<{ parent_id: string | null }>(t.database.db, sql`select parent_id from collections where id = ${sub._id}`);
    assert.equal(c!.parent_id, null);
    // and no row can be written pointing at a missing collection
    await assert.rejects(makeUpload({ owner: w.userA1, scope: 'personal', collectionId: newId() }));
    await assert.rejects(t.database.db.execute(sql`update collections set parent_id = ${newId()} where id = ${sub._id}`));
    // account_shared is derived from the scope, not stored
    const columns = await rowsOf<{ column_name: string }>(t.database.db, sql`select column_name from information_schema.columns where table_name = 'collections'`);
    assert.ok(!columns.some((col) => col.column_name === 'account_shared'));
    // an upload into a collection deleted meanwhile is refused, and PATCH cannot move a file there
    const gone = await createCollection('userA1', { name: 'Gone', scope: 'personal' });
    const kept = await makeUpload({ owner: w.userA1, scope: 'personal' });
    assert.equal((await call('DELETE', `/api/user/collection/${gone._id}`, 'userA1')).statusCode, 200);
    const move = await call('PATCH', `/api/user/files/${kept}`, 'userA1', { collection: gone._id });
    assert.equal(move.statusCode, 404);
    assert.equal(move.json().error.code, 'NOT_FOUND');
    assert.equal(move.json().message, 'Collection not found');
  });

  // ───── isolation ─────

  test('isolation: other user, other institution, other account get 404 on every route', async () => {
    const personal = await createCollection('userA1', { name: 'P', scope: 'personal' });
    const instance = await createCollection('userA1', { name: 'I', scope: 'instance' });
    const account = await createCollection('userA1', { name: 'A', scope: 'account' });
    const cases: Array<[string, { _id: string }]> = [
      ['userA1b', personal], // same institution, other user
      ['userA2', personal],
      ['userA2', instance], // same account, other institution
      ['userB1', personal], // other account
      ['userB1', instance],
      ['userB1', account],
    ];
    for (const [who, c] of cases) {
      const label = `${who} on ${c._id}`;
      assert.equal((await call('GET', `/api/user/collection/${c._id}`, who)).statusCode, 404, label);
      assert.equal((await call('GET', `/api/user/collections?parent=${c._id}`, who)).statusCode, 404, label);
      assert.equal((await call('PATCH', `/api/user/collection/${c._id}`, who, { name: 'hijack' })).statusCode, 404, label);
      assert.equal((await call('DELETE', `/api/user/collection/${c._id}`, who)).statusCode, 404, label);
      assert.equal((await call('POST', '/api/user/collection', who, { name: 'child', parent: c._id })).statusCode, 404, label);
      const sel = await selectAll(who, { parent: c._id });
      assert.equal(sel.statusCode, 404, label);
      assert.deepEqual(sel.json().error, { code: 'NOT_FOUND', details: [] });
    }
    // nothing changed
    assert.equal((await call('GET', `/api/user/collection/${personal._id}`, 'userA1')).json().data.name, 'P');
    // account scope reaches the sibling institution, not the other account
    assert.equal((await call('GET', `/api/user/collection/${account._id}`, 'userA2')).statusCode, 200);
    const a2Roots = (await call('GET', '/api/user/collections?scope=account', 'userA2')).json().data.map((c: any) => c._id);
    assert.ok(a2Roots.includes(account._id));
    const b1Roots = (await call('GET', '/api/user/collections', 'userB1')).json().data.map((c: any) => c._id);
    assert.ok(![personal._id, instance._id, account._id].some((id) => b1Roots.includes(id)));
    // listing another institution's root: 403 (not a member)
    assert.equal((await call('GET', `/api/user/collections?scope=instance&institution=${w.a1.id}`, 'userB1')).statusCode, 403);
  });

  // ───── select-all-ids ─────

  describe('select-all-ids', () => {
    let root: { _id: string };
    let child: { _id: string };
    let grandchild: { _id: string };
    const files: Record<string, string> = {};

    before(async () => {
      // an institution of its own so that the root level holds only what this block creates
      const { makeInstitution } = await import('./support/app.js');
      const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Select Inst' });
      const owner = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
      const colleague = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
      tok.selOwner = (await login(t.app, owner.email)).accessToken;
      tok.selColleague = (await login(t.app, colleague.email)).accessToken;
      root = await createCollection('selOwner', { name: 'Course', scope: 'instance' });
      child = await createCollection('selOwner', { name: 'Week 1', parent: root._id });
      grandchild = await createCollection('selOwner', { name: 'Day 1', parent: child._id });
      await createCollection('selOwner', { name: 'Week 2', parent: root._id });
      const at = (collectionId: string | null, originalname: string, status = 'active', extra: { isPrivate?: boolean; owner?: { id: string; accountId: string } } = {}) =>
        makeUpload({ owner: extra.owner ?? owner, scope: 'instance', institutionId: inst.id, collectionId, originalname, status, isPrivate: extra.isPrivate });
      // root level files
      files.rootA = await at(null, 'Syllabus.pdf');
      files.rootDeleted = await at(null, 'Old syllabus.pdf', 'deleted');
      // in the course collection
      files.percent = await at(root._id, '100% done.txt');
      files.hundred = await at(root._id, '100 done.txt');
      files.underscore = await at(root._id, 'a_b.txt');
      files.axb = await at(root._id, 'axb.txt');
      files.regex = await at(root._id, 'notes (v1).*.md');
      files.regexNear = await at(root._id, 'notes v1.md');
      files.backslash = await at(root._id, 'C:\\temp\\x.txt');
      files.upper = await at(root._id, 'REPORT-Final.DOCX');
      files.inactive = await at(root._id, 'inactive.txt', 'inactive');
      files.selected = await at(root._id, 'selected.txt', 'selected');
      files.error = await at(root._id, 'broken.txt', 'error');
      files.deleted = await at(root._id, 'gone.txt', 'deleted');
      files.processing = await at(root._id, 'pending.txt', 'processing');
      files.colleaguePrivate = await at(root._id, 'colleague-private.txt', 'active', { isPrivate: true, owner: colleague });
      // nested
      files.week1 = await at(child._id, 'week1.txt');
      files.week1b = await at(child._id, 'week1-deleted.txt', 'deleted');
      files.day1 = await at(grandchild._id, 'day1.txt');
    });

    const idsOf = (res: { json(): any }) => (res.json().fileIds as string[]).slice().sort();
    const expectIds = (...keys: string[]) => keys.map((k) => files[k]!).sort();

    test('root level requires scope', async () => {
      const res = await selectAll('selOwner', {});
      assert.equal(res.statusCode, 400);
      assert.deepEqual(res.json(), {
        success: false,
        message: 'scope is required at the vault root',
        error: { code: 'VALIDATION_FAILED', details: [{ field: 'scope', message: 'scope is required at the vault root' }] },
      });
      assert.equal((await selectAll('selOwner', { parent: null })).statusCode, 400);
      assert.equal((await selectAll('selOwner', { scope: 'everything' })).statusCode, 400);
    });

    test('root: files without a collection and the root collections, deleted files left out', async () => {
      const res = await selectAll('selOwner', { scope: 'instance' });
      assert.equal(res.statusCode, 200);
      const body = res.json();
      assert.deepEqual(Object.keys(body).sort(), ['collectionIds', 'collections', 'fileIds', 'files', 'filtered', 'success', 'totalFiles']);
      assert.equal(body.success, true);
      assert.equal(body.filtered, false);
      assert.deepEqual(body.files, [{ _id: files.rootA, originalname: 'Syllabus.pdf' }]);
      assert.deepEqual(body.fileIds, [files.rootA]);
      assert.equal(body.totalFiles, 1);
      assert.deepEqual(body.collectionIds, [root._id]);
      // fileCount: visible, non-deleted files directly in the collection (not recursive)
      assert.deepEqual(body.collections, [{ _id: root._id, name: 'Course', fileCount: 12 }]);
      // the personal root of the same user is another level
      const personal = (await selectAll('selOwner', { scope: 'personal' })).json();
      assert.deepEqual([personal.fileIds, personal.collectionIds], [[], []]);
    });

    test('inside a collection: its direct files and sub-collections; nested parents', async () => {
      const body = (await selectAll('selOwner', { parent: root._id })).json();
      assert.equal(body.filtered, false);
      assert.deepEqual(
        body.fileIds.slice().sort(),
        expectIds('percent', 'hundred', 'underscore', 'axb', 'regex', 'regexNear', 'backslash', 'upper', 'inactive', 'selected', 'error', 'processing'),
      );
      assert.ok(!body.fileIds.includes(files.colleaguePrivate), 'a colleague\'s private file is not visible');
      assert.equal(body.totalFiles, 12);
      assert.deepEqual(
        body.collections.map((c: any) => [c.name, c.fileCount]),
        [
          ['Week 1', 1],
          ['Week 2', 0],
        ],
      );
      assert.deepEqual(body.collectionIds, body.collections.map((c: any) => c._id));
      assert.deepEqual(body.fileIds, body.files.map((f: any) => f._id));

      const nested = (await selectAll('selOwner', { parent: child._id })).json();
      assert.deepEqual(nested.fileIds, [files.week1]);
      assert.deepEqual(nested.collections, [{ _id: grandchild._id, name: 'Day 1', fileCount: 1 }]);
      const deepest = (await selectAll('selOwner', { parent: grandchild._id })).json();
      assert.deepEqual(deepest.fileIds, [files.day1]);
      assert.deepEqual(deepest.collections, []);

      // the colleague sees the same place minus the owner's nothing-private, plus their own private file
      const colleague = (await selectAll('selColleague', { parent: root._id })).json();
      assert.ok(colleague.fileIds.includes(files.colleaguePrivate));
      assert.equal(colleague.totalFiles, 13);
      // a scope that contradicts the parent
      assert.equal((await selectAll('selOwner', { parent: root._id, scope: 'personal' })).statusCode, 400);
    });

    test('each status filter, and excluded', async () => {
      const cases: Array<[string, string[]]> = [
        ['active', ['percent', 'hundred', 'underscore', 'axb', 'regex', 'regexNear', 'backslash', 'upper']],
        ['inactive', ['inactive']],
        ['selected', ['selected']],
        ['error', ['error']],
        ['deleted', ['deleted']],
        ['excluded', ['percent', 'hundred', 'underscore', 'axb', 'regex', 'regexNear', 'backslash', 'upper', 'inactive', 'error', 'processing']],
      ];
      for (const [status, keys] of cases) {
        const res = await selectAll('selOwner', { parent: root._id, status });
        assert.equal(res.statusCode, 200, status);
        const body = res.json();
        assert.deepEqual(idsOf(res), expectIds(...keys), status);
        assert.equal(body.totalFiles, keys.length, status);
        assert.equal(body.filtered, true, status);
        assert.deepEqual(body.collections, [], status);
        assert.deepEqual(body.collectionIds, [], status);
      }
      const rootDeleted = await selectAll('selOwner', { scope: 'instance', status: 'deleted' });
      assert.deepEqual(idsOf(rootDeleted), [files.rootDeleted]);
      assert.deepEqual(rootDeleted.json().collections, []);
      // `processing`: the same filter as the file list accepts it
      const processing = await selectAll('selOwner', { parent: root._id, status: 'processing' });
      assert.equal(processing.statusCode, 200);
      assert.deepEqual(idsOf(processing), expectIds('processing'));
      assert.equal((await selectAll('selOwner', { parent: root._id, status: 'bogus' })).statusCode, 400);
    });

    test('fileNameSearch: case-insensitive substring, metacharacters taken literally', async () => {
      const search = async (fileNameSearch: string, extra: object = {}) => {
        const res = await selectAll('selOwner', { parent: root._id, fileNameSearch, ...extra });
        assert.equal(res.statusCode, 200, fileNameSearch);
        assert.equal(res.json().filtered, true);
        assert.deepEqual(res.json().collections, []);
        assert.deepEqual(res.json().collectionIds, []);
        return idsOf(res);
      };
      assert.deepEqual(await search('%'), expectIds('percent'));
      assert.deepEqual(await search('100%'), expectIds('percent'));
      assert.deepEqual(await search('_'), expectIds('underscore'));
      assert.deepEqual(await search('a_b'), expectIds('underscore'));
      assert.deepEqual(await search('(v1).*'), expectIds('regex'));
      assert.deepEqual(await search('.*'), expectIds('regex'));
      assert.deepEqual(await search('\\'), expectIds('backslash'));
      assert.deepEqual(await search('c:\\temp'), expectIds('backslash'));
      assert.deepEqual(await search('report-final'), expectIds('upper'));
      // spaces are part of the term: ' v1' is in 'notes v1.md', not in 'notes (v1).*.md'
      assert.deepEqual(await search(' v1'), expectIds('regexNear'));
      assert.deepEqual(await search('v1'), expectIds('regex', 'regexNear'));
      assert.deepEqual(await search('[a-z]'), []);
      assert.deepEqual(await search('^notes'), []);
      assert.deepEqual(await search("'; drop table uploads; --"), []);
      // combined with a status filter
      assert.deepEqual(await search('.txt', { status: 'excluded' }), expectIds('percent', 'hundred', 'underscore', 'axb', 'backslash', 'inactive', 'error', 'processing'));
      // a blank search is no filter
      const blank = (await selectAll('selOwner', { parent: root._id, fileNameSearch: '   ' })).json();
      assert.equal(blank.filtered, false);
      assert.equal(blank.collections.length, 2);
      // at the root, a search does not look inside collections
      assert.deepEqual(idsOf(await selectAll('selOwner', { scope: 'instance', fileNameSearch: 'syllabus' })), [files.rootA]);
      assert.equal((await selectAll('selOwner', { parent: root._id, fileNameSearch: 5 })).statusCode, 400);
    });

    test('other tenants: foreign parent 404, foreign institution 403, own root empty', async () => {
      for (const who of ['userA1', 'userA2', 'userB1']) {
        assert.equal((await selectAll(who, { parent: root._id })).statusCode, 404, who);
        assert.equal((await selectAll(who, { parent: child._id, status: 'active' })).statusCode, 404, who);
        const own = (await selectAll(who, { scope: 'instance', fileNameSearch: 'syllabus' })).json();
        assert.ok(!own.fileIds.includes(files.rootA), who);
      }
      const override = await selectAll('userB1', { scope: 'instance', institution: w.a1.id });
      assert.equal(override.statusCode, 403);
      assert.equal(override.json().error.code, 'FORBIDDEN');
      assert.equal((await selectAll('userA1', { parent: newId() })).statusCode, 404);
      assert.equal((await selectAll('userA1', { parent: 'nope' })).statusCode, 400);
    });

    test('account scope at the root is shared by sibling institutions, and institution overrides the current one', async () => {
      const shared = await createCollection('userA1', { name: `Shared ${newId().slice(-6)}`, account_shared: true });
      const f = await makeUpload({ owner: w.userA1, scope: 'account', institutionId: w.a1.id, originalname: 'account-wide.txt' });
      const fromA2 = (await selectAll('userA2', { scope: 'account' })).json();
      assert.ok(fromA2.collectionIds.includes(shared._id));
      assert.ok(fromA2.fileIds.includes(f));
      const fromB1 = (await selectAll('userB1', { scope: 'account' })).json();
      assert.ok(!fromB1.collectionIds.includes(shared._id));
      assert.ok(!fromB1.fileIds.includes(f));
      // a member of A1 and A2, current institution A1, asks for A2's instance root
      const multi = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.a2.id]: 'user' } });
      const mt = (await login(t.app, multi.email)).accessToken;
      const inA2 = await makeUpload({ owner: multi, scope: 'instance', institutionId: w.a2.id, originalname: 'a2-only.txt' });
      const current = (await t.app.inject({ method: 'POST', url: '/api/user/collections/select-all-ids', headers: bearer(mt), payload: { scope: 'instance' } })).json();
      assert.ok(!current.fileIds.includes(inA2));
      const overridden = (await t.app.inject({ method: 'POST', url: '/api/user/collections/select-all-ids', headers: bearer(mt), payload: { scope: 'instance', institution: w.a2.id } })).json();
      assert.ok(overridden.fileIds.includes(inA2));
    });
  });
});
