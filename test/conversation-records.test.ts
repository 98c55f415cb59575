import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { histories } from '../src/db/schema.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';

type World = Awaited<ReturnType<typeof makeWorld>>;

/** Histories listing and marking, assistants and their visibility, and the admin feedbacks/assistants listings. */
describe('conversation records: histories, assistants, admin listings', () => {
  let t: TestApp;
  let w: World;
  const tok: Record<string, string> = {};
  const T0 = Date.parse('2026-01-01T00:00:00Z');
  const ids: Record<string, string> = {};

  async function record(name: string, fields: Partial<typeof histories.$inferInsert> & { userId: string; accountId: string; minutes: number }) {
    const id = newId();
    ids[name] = id;
    const at = new Date(T0 + fields.minutes * 60_000);
    const { minutes: _m, ...rest } = fields;
    await t.database.db.insert(histories).values({ id, success: true, input: name, inputs: [name], outputs: [`answer ${name}`], createdAt: at, updatedAt: at, ...rest });
  }

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '1000' } });
    w = await makeWorld(t.database);
    // userA1 is enrolled in a1 (current) and a2.
    const { upsertMembership } = await import('../src/modules/tenancy/tenancy.repository.js');
    await upsertMembership(t.database.db, w.userA1.id, w.a2.id, 'user');
    for (const [name, user] of Object.entries({
      userA1: w.userA1,
      adminA1: w.adminA1,
      userA2: w.userA2,
      userB1: w.userB1,
      superadmin: w.superadmin,
      accountAdminA: w.accountAdminA,
      accountAdminB: w.accountAdminB,
    })) {
      tok[name] = (await login(t.app, user.email)).accessToken;
    }
    const a = { userId: w.userA1.id, accountId: w.accountA.id };
    await record('first in a1', { ...a, institutionId: w.a1.id, courseId: 0, minutes: 1 });
    await record('second in a1 no course', { ...a, institutionId: w.a1.id, courseId: null, minutes: 2 });
    await record('third in a1 course 5', { ...a, institutionId: w.a1.id, courseId: 5, minutes: 3, toolCalls: [{ tool: 'vault_search', arguments: { query: 'x' }, response: 'R'.repeat(150) }] });
    await record('Fourth LONG', { ...a, institutionId: w.a1.id, courseId: 5, minutes: 4, outputs: ['y'.repeat(500)], inputs: ['z'.repeat(300)] });
    await record('personal one', { ...a, institutionId: null, minutes: 5 });
    await record('in a2', { ...a, institutionId: w.a2.id, minutes: 6, experimental: true, promptMode: 'soul' });
    await record('someone else', { userId: w.userB1.id, accountId: w.accountB.id, institutionId: w.b1.id, minutes: 7 });
  });
  after(() => t.close());

  const histories_ = (token: string, body: Record<string, unknown> = {}) =>
    t.app.inject({ method: 'POST', url: '/api/user/histories', headers: { 'x-access-token': token }, payload: body });
  const inputsOf = (res: { json(): any }) => res.json().data.map((r: any) => r.in.input);

  test('default: the current institution, oldest first, only the caller’s records', async () => {
    const res = await histories_(tok.userA1!);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(inputsOf(res), ['first in a1', 'second in a1 no course', 'third in a1 course 5', 'Fourth LONG']);
    assert.equal(res.json().total, undefined);
    assert.equal(res.json().data[0].institution, w.a1.id);
  });

  test('limit keeps the newest, returned oldest first; before/after; historyId; course_id 0 ↔ null', async () => {
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { limit: 2 })), ['third in a1 course 5', 'Fourth LONG']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { before: T0 + 3 * 60_000 })), ['first in a1', 'second in a1 no course']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { after: T0 + 3 * 60_000 })), ['Fourth LONG']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['third in a1 course 5'] })), ['third in a1 course 5']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { course_id: 0 })), ['first in a1', 'second in a1 no course']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { course_id: 5 })), ['third in a1 course 5', 'Fourth LONG']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { institution: w.a2.id })), ['in a2']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { institution: null })), ['personal one']);
    // Another user's record is never returned, even by id.
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['someone else'], allInstitutions: true })), []);
  });

  test('historyId finds the caller\'s record wherever it was asked, unless institution narrows it; never another user\'s', async () => {
    // The default listing (current institution a1) does not hold these records...
    assert.ok(!inputsOf(await histories_(tok.userA1!)).includes('in a2'));
    // ...but by id they are found: another institution, the personal space, an institution left since.
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['in a2'] })), ['in a2']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['personal one'] })), ['personal one']);
    await record('asked in b1 before leaving it', { userId: w.userA1.id, accountId: w.accountB.id, institutionId: w.b1.id, minutes: 8 });
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['asked in b1 before leaving it'] })), ['asked in b1 before leaving it']);
    // An explicit institution still narrows the lookup.
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['in a2'], institution: w.a2.id })), ['in a2']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['in a2'], institution: w.a1.id })), []);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['in a2'], institution: null })), []);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['personal one'], institution: null })), ['personal one']);
    // Tenant isolation: another user's record is never found by id, in or out of its institution.
    const foreign = await histories_(tok.userA1!, { historyId: ids['someone else'] });
    assert.equal(foreign.statusCode, 200, foreign.body);
    assert.deepEqual(inputsOf(foreign), []);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { historyId: ids['someone else'], institution: w.b1.id })), []);
    assert.deepEqual(inputsOf(await histories_(tok.userB1!, { historyId: ids['in a2'] })), []);
    assert.deepEqual(inputsOf(await histories_(tok.userB1!, { historyId: ids['someone else'] })), ['someone else']);
  });

  test('before/after: values past 9999-12-31T23:59:59.999Z are a 400 VALIDATION_FAILED, the last representable one a 200', async () => {
    for (const body of [{ before: 253402300800000 }, { after: 253402300800000 }, { before: 8640000000000000 }, { after: 8640000000000000 }, { before: -1 }]) {
      const res = await histories_(tok.userA1!, body);
      assert.equal(res.statusCode, 400, `${JSON.stringify(body)}: ${res.body}`);
      const err = res.json();
      assert.equal(err.success, false);
      assert.equal(typeof err.message, 'string');
      assert.equal(err.error.code, 'VALIDATION_FAILED');
      assert.ok(Array.isArray(err.error.details) && err.error.details.length > 0, res.body);
    }
    const latest = await histories_(tok.userA1!, { before: 253402300799999 });
    assert.equal(latest.statusCode, 200, latest.body);
    assert.deepEqual(inputsOf(latest), ['first in a1', 'second in a1 no course', 'third in a1 course 5', 'Fourth LONG']);
    const none = await histories_(tok.userA1!, { after: 253402300799999 });
    assert.equal(none.statusCode, 200, none.body);
    assert.deepEqual(inputsOf(none), []);
    assert.equal((await histories_(tok.userA1!, { after: 0 })).statusCode, 200);
  });

  test('search is a case-insensitive regex over inputs and outputs; invalid or back-referencing patterns are 400', async () => {
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { search: 'fourth|^FIRST' })), ['first in a1', 'Fourth LONG']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { search: 'ANSWER third' })), ['third in a1 course 5']);
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { search: '50%_' })), []);
    // the empty regular expression is valid and matches every record, as no search does
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { search: '' })), inputsOf(await histories_(tok.userA1!, {})));
    assert.ok(inputsOf(await histories_(tok.userA1!, {})).length > 2);
    for (const bad of ['(unclosed', '[z-a]', '(a)\\1']) {
      const res = await histories_(tok.userA1!, { search: bad });
      assert.equal(res.statusCode, 400, `${bad}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().success, false);
      assert.doesNotMatch(res.json().message, /select|params/i, 'the reason, not the query that found it');
    }
    assert.match((await histories_(tok.userA1!, { search: '(unclosed' })).json().message, /not a valid regular expression \(parentheses \(\) not balanced\)/);
    // A classic catastrophic-backtracking pattern answers promptly (Postgres' engine does not backtrack exponentially).
    const started = Date.now();
    const res = await histories_(tok.userA1!, { search: '(a+)+$' });
    assert.equal(res.statusCode, 200);
    assert.ok(Date.now() - started < 5000);
  });

  test('a search whose counted repetitions expand too far is a 400 before the engine compiles it', async () => {
    // (.{0,255}){0,255} held the embedded engine for minutes (every tenant waiting); nested counts multiply
    for (const bad of ['(.{0,255}){0,255}z', '(a{0,100}){0,100}z', '((a{2,}){20}){30}', '.{0,255}.{0,255}.{0,255}.{0,255}']) {
      const res = await histories_(tok.userA1!, { search: bad });
      assert.equal(res.statusCode, 400, `${bad}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.match(res.json().message, /^search repeats too much: .*at most 1000/u);
    }
    // the same automata written in the syntaxes the embedded options switch to (x: white space inside a bound is
    // skipped, so {0,25 5} is {0,255}; b: a bound is \{m,n\}), with or without a director first: refused, whatever their size
    // (the small ones first: on an engine without this check the large ones hold it for minutes)
    for (const other of ['(?e)a+', '(?xi)a', '(?b)\\(.\\{0,60\\}\\)\\{0,60\\}', '***:(?ix)(a|b{0,10 0}){0,10 0}c', '(?x)(.{0,25 5}){0,25 5}z']) {
      const res = await histories_(tok.userA1!, { search: other });
      assert.equal(res.statusCode, 400, `${other}: ${res.body}`);
      assert.match(res.json().message, /embedded options b, e or x/u, other);
    }
    // a single bounded repetition, small nested ones, and the options that keep the syntax, are fine
    for (const ok of ['first.{0,255}a1', '(in ){1,3}a[0-9]{1}', '[[:alpha:]]{2,5} (?:a1|a2){1}', '(?i)first', '***:(?c)first', '***=a{0,255}']) {
      assert.equal((await histories_(tok.userA1!, { search: ok })).statusCode, 200, ok);
    }
    assert.deepEqual(inputsOf(await histories_(tok.userA1!, { search: 'first.{0,255}a1' })), ['first in a1']);
  });

  test('a search is matched a page of text at a time: the newest matches and the total are those of one match over everything; a search over its time budget stops', async () => {
    // a user of its own with 400 records of ~1.5 KB (about 10 pages of 64 KB) and one of 150 KB matched a slice at a time
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const token = (await login(t.app, user.email)).accessToken;
    const rows: Array<typeof histories.$inferInsert> = [];
    for (let i = 0; i < 400; i++) {
      const at = new Date(T0 + i * 60_000);
      const hit = i % 7 === 3 ? ` needle-${i}` : '';
      rows.push({ id: newId(), userId: user.id, accountId: w.accountA.id, institutionId: w.a1.id, success: true, input: `record ${i}`, inputs: [`record ${i}`], outputs: [`${'filler words '.repeat(110)}${hit}`], createdAt: at, updatedAt: at });
    }
    // the large one: its match is in the last of four 40,000-character strings
    const bigAt = new Date(T0 + 500 * 60_000);
    rows.push({ id: newId(), userId: user.id, accountId: w.accountA.id, institutionId: w.a1.id, success: true, input: 'big', inputs: ['a'.repeat(40_000), 'b'.repeat(40_000), 'c'.repeat(40_000)], outputs: [`${'d'.repeat(39_990)} needle-big`], createdAt: bigAt, updatedAt: bigAt });
    for (let i = 0; i < rows.length; i += 100) await t.database.db.insert(histories).values(rows.slice(i, i + 100));
    const { SEARCH_PAGE_CHARS, listHistories, SearchBudgetExceeded } = await import('../src/modules/conversation/histories.repository.js');
    const matching = rows.filter((r) => [r.input, ...(r.inputs ?? []), ...(r.outputs ?? [])].some((x) => /NEEDLE-\d+|needle-big/iu.test(x!)));
    assert.equal(matching.length, 58);
    assert.ok(rows.reduce((n, r) => n + (r.outputs ?? []).join('').length, 0) > 8 * SEARCH_PAGE_CHARS, 'several pages');
    const res = await histories_(token, { allInstitutions: true, search: 'NEEDLE-[0-9]+|needle-big', limit: 5 });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    const newest = matching.slice(-5);
    assert.deepEqual(body.data.map((r: any) => r.in.input), newest.map((r) => r.input));
    assert.equal(body.total, 58);
    assert.equal(body.totalInScope, 401);
    // the large record alone: found in its last slice, and not found by a pattern none of its strings holds
    assert.deepEqual(inputsOf(await histories_(token, { search: 'needle-big' })), ['big']);
    assert.deepEqual(inputsOf(await histories_(token, { search: 'aaab' })), []);
    // without a search, the listing is as before
    assert.equal((await histories_(token, { limit: 1000 })).json().data.length, 401);
    // a search over its budget stops (here a budget of 0: after the first page); one page is always matched
    const q = { userId: user.id, institutionId: w.a1.id, search: 'needle', limit: 100 };
    await assert.rejects(listHistories(t.database.db, q, true, 0), SearchBudgetExceeded);
    assert.deepEqual((await listHistories(t.database.db, { ...q, search: '^big$', limit: 1 }, false, 0)).rows.map((r) => r.input), ['big']);
  });

  test('trimming to 200 characters, tool responses cut at 80 unless tools', async () => {
    const [rec] = (await histories_(tok.userA1!, { historyId: ids['Fourth LONG'] })).json().data;
    assert.equal(rec.in.inputs[0].length, 200);
    assert.equal(rec.out.outputs[0].length, 200);
    const short = (await histories_(tok.userA1!, { historyId: ids['third in a1 course 5'] })).json().data[0];
    assert.equal(short.tools[0].response.length, 80);
    const full = (await histories_(tok.userA1!, { historyId: ids['third in a1 course 5'], tools: true })).json().data[0];
    assert.equal(full.tools[0].response.length, 150);
  });

  test('allInstitutions: every enrolment plus personal, institution objects, the two totals', async () => {
    const res = await histories_(tok.userA1!, { allInstitutions: true, search: 'in a', limit: 2, course_id: 5 });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.total, 4, 'matches of the search, not capped by limit (first/second/third in a1, in a2)');
    assert.equal(body.totalInScope, 6, 'every record of a1, a2 and the personal space');
    assert.deepEqual(inputsOf(res), ['third in a1 course 5', 'in a2']);
    assert.deepEqual(body.data[1].institution, { _id: w.a2.id, name: 'Acme History', ainame: 'Herodotus', picture: '' });
    assert.equal(body.data[1].experimental, true);
    assert.equal(body.data[1].promptMode, 'soul');
    const personal = (await histories_(tok.userA1!, { allInstitutions: true, search: 'personal' })).json();
    assert.deepEqual(personal.data[0].institution, { personal: true });
    assert.equal(personal.total, 1);
  });

  test('PATCH a record: own only; feedback appears in the admin feedbacks listing, scoped per admin role', async () => {
    const id = ids['first in a1']!;
    const res = await t.app.inject({ method: 'PATCH', url: `/api/user/history/${id}`, headers: bearer(tok.userA1!), payload: { favorite: true, thumbUpDown: 'down', feedback: 'Wrong year' } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual([res.json().data.favorite, res.json().data.thumbUpDown, res.json().data.feedback], [true, 'down', 'Wrong year']);
    assert.equal((await t.app.inject({ method: 'PATCH', url: `/api/user/history/${id}`, headers: bearer(tok.userB1!), payload: { favorite: false } })).statusCode, 404);
    assert.equal((await t.app.inject({ method: 'PATCH', url: `/api/user/history/${id}`, headers: bearer(tok.userA1!), payload: { thumbUpDown: 'sideways' } })).statusCode, 400);
    await t.app.inject({ method: 'PATCH', url: `/api/user/history/${ids['someone else']}`, headers: bearer(tok.userB1!), payload: { thumbUpDown: 'up' } });

    const feedbacks = (token: string, body: Record<string, unknown> = {}) => t.app.inject({ method: 'POST', url: '/api/admin/feedbacks', headers: { 'x-access-token': token }, payload: body });
    const ofSuper = await feedbacks(tok.superadmin!);
    assert.equal(ofSuper.statusCode, 200, ofSuper.body);
    assert.equal(ofSuper.json().total, 2);
    assert.deepEqual(Object.keys(ofSuper.json()).sort(), ['data', 'hasMore', 'message', 'page', 'pageSize', 'success', 'total']);
    assert.equal(ofSuper.json().pageSize, 100);
    const a1Admin = await feedbacks(tok.adminA1!);
    assert.deepEqual(a1Admin.json().data.map((f: any) => [f.feedback, f.user.email]), [['Wrong year', w.userA1.email]]);
    assert.equal((await feedbacks(tok.accountAdminB!)).json().data[0].thumbUpDown, 'up');
    assert.equal((await feedbacks(tok.accountAdminB!)).json().total, 1);
    assert.equal((await feedbacks(tok.userA1!)).statusCode, 403);
    assert.equal((await feedbacks('garbage')).statusCode, 401);
    // Filters: account (space-separated), institution, usersearch literal.
    assert.equal((await feedbacks(tok.superadmin!, { account: `${w.accountA.id}  ${w.accountB.id}` })).json().total, 2);
    assert.equal((await feedbacks(tok.superadmin!, { account: w.accountB.id })).json().total, 1);
    assert.equal((await feedbacks(tok.superadmin!, { institution: w.a1.id })).json().total, 1);
    assert.equal((await feedbacks(tok.superadmin!, { usersearch: w.userA1.email.slice(0, 10).toUpperCase() })).json().total, 1);
    assert.equal((await feedbacks(tok.superadmin!, { usersearch: '%' })).json().total, 0);
    assert.equal((await feedbacks(tok.superadmin!, { usersearch: '.*' })).json().total, 0);
    // Pagination and its bounds; limitsearch is the deprecated alias of pageSize.
    const page2 = (await feedbacks(tok.superadmin!, { limitsearch: 1, page: 2 })).json();
    assert.deepEqual([page2.page, page2.pageSize, page2.hasMore, page2.data.length], [2, 1, false, 1]);
    assert.equal((await feedbacks(tok.superadmin!, { pageSize: 1, page: 1 })).json().hasMore, true);
    for (const body of [{ page: 0 }, { pageSize: 0 }, { pageSize: 5001 }, { limitsearch: 5001 }, { account: 'not-an-id' }]) {
      assert.equal((await feedbacks(tok.superadmin!, body)).statusCode, 400, JSON.stringify(body));
    }
  });

  describe('assistants', () => {
    const create = (token: string, body: Record<string, unknown>) => t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(token), payload: body });
    const get = (token: string, id: string) => t.app.inject({ method: 'GET', url: `/api/user/assistant/${id}`, headers: bearer(token) });
    let shared: string;
    let privateOne: string;
    let adminOnly: string;
    let system: string;

    before(async () => {
      const s = await create(tok.userA1!, { name: 'Shared helper', description: 'd', instructions: 'Be brief.', institution_shared: true, argument_1: 'a1', argument_5: 'a5', assistantToolMode: 'selected', assistantTools: [{ tool: 'vault_search', instructionsOverride: 'Search the syllabus' }] });
      assert.equal(s.statusCode, 201, s.body);
      shared = s.json().data._id;
      privateOne = (await create(tok.userA1!, { name: 'Private helper' })).json().data._id;
      const ao = await create(tok.adminA1!, { name: 'Admins only', admin_only: true, institution_shared: true });
      assert.equal(ao.statusCode, 201, ao.body);
      adminOnly = ao.json().data._id;
      const sys = await create(tok.adminA1!, { name: 'System tutor', system: true });
      assert.equal(sys.statusCode, 201, sys.body);
      system = sys.json().data._id;
    });

    test('every field of the spec, with user, institution and account data', async () => {
      const data = (await get(tok.userA1!, shared)).json().data;
      for (const k of ['_id', 'name', 'description', 'instructions', 'picture_url', 'liked_count', 'remember_history', 'history_count', 'admin_only', 'institution_shared', 'editable_others', 'created', 'argument_1', 'argument_5', 'ragCollections', 'assistantToolMode', 'assistantTools', 'user_data', 'institution_data', 'account_data']) {
        assert.ok(k in data, k);
      }
      assert.deepEqual(data.user_data, { email: w.userA1.email, fname: 'Test', lname: 'User', institution: w.a1.id, accountType: 'user' });
      assert.deepEqual(data.institution_data, { name: 'Acme Physics', ainame: 'Newton', status: 'active', picture: '' });
      assert.deepEqual(data.account_data, { name: 'Acme University', status: 'active' });
      assert.deepEqual(data.assistantTools, [{ tool: 'vault_search', instructionsOverride: 'Search the syllabus' }]);
      assert.equal(data.argument_5, 'a5');
    });

    test("user_data.institution never names an institution of another tenant (an owner of another account enrolled here)", async () => {
      // a user of account A, enrolled in b1 too (as a superadmin may do), makes an assistant in b1, then works in a1 again
      const outsider = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user', [w.b1.id]: 'user' } });
      const token = (await login(t.app, outsider.email)).accessToken;
      const made = await create(token, { name: 'Outsider helper', institution: w.b1.id, institution_shared: true });
      assert.equal(made.statusCode, 201, made.body);
      const { updateUser } = await import('../src/modules/identity/identity.repository.js');
      await updateUser(t.database.db, outsider.id, { currentInstitutionId: w.a1.id }, new Date());
      const seenByB = (await get(tok.accountAdminB!, made.json().data._id)).json().data;
      assert.equal(seenByB.user_data.email, outsider.email);
      assert.equal(seenByB.user_data.institution, '');
      const listed = (await t.app.inject({ method: 'POST', url: '/api/admin/assistants', headers: bearer(tok.accountAdminB!), payload: { pageSize: 5000 } })).json().data;
      assert.deepEqual(listed.filter((a: any) => a.name === 'Outsider helper').map((a: any) => a.user_data.institution), ['']);
      // within its own tenant the owner's current institution is shown as before (the shared helper's test above)
      await updateUser(t.database.db, outsider.id, { currentInstitutionId: w.b1.id }, new Date());
      assert.equal((await get(tok.accountAdminB!, made.json().data._id)).json().data.user_data.institution, w.b1.id);
      // gone again: the listings' counts below are of the assistants made in `before`
      assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/user/assistant/${made.json().data._id}`, headers: bearer(token) })).statusCode, 200);
    });

    test('visibility: shared and system to members, private to its owner, admin_only to admins, nothing across tenants', async () => {
      const other = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
      const otherTok = (await login(t.app, other.email)).accessToken;
      const names = async (token: string) => (await t.app.inject({ method: 'GET', url: '/api/user/assistants', headers: bearer(token) })).json().data.map((a: any) => a.name).sort();
      assert.deepEqual(await names(otherTok), ['Shared helper', 'System tutor']);
      assert.deepEqual(await names(tok.userA1!), ['Private helper', 'Shared helper', 'System tutor']);
      assert.deepEqual(await names(tok.adminA1!), ['Admins only', 'Private helper', 'Shared helper', 'System tutor']);
      assert.equal((await get(otherTok, privateOne)).statusCode, 404);
      assert.equal((await get(otherTok, adminOnly)).statusCode, 404);
      assert.equal((await get(tok.userB1!, shared)).statusCode, 404);
      assert.equal((await get(tok.accountAdminB!, shared)).statusCode, 404);
      assert.equal((await get(tok.accountAdminA!, privateOne)).statusCode, 200);
      // Plain members may not set admin_only or create system assistants.
      assert.equal((await create(otherTok, { name: 'x', admin_only: true })).statusCode, 403);
      assert.equal((await create(otherTok, { name: 'x', system: true })).statusCode, 403);
      assert.equal((await create(otherTok, { name: 'x', institution: w.b1.id })).statusCode, 404);
      assert.equal((await create(otherTok, { name: '' })).statusCode, 400);
      assert.equal((await create(otherTok, { name: 'x', ragCollections: ['0190a0a0-0000-7000-8000-000000000000'] })).statusCode, 400);
      assert.equal((await create(otherTok, { name: 'x', assistantToolMode: 'sometimes' })).statusCode, 400);
      assert.equal((await t.app.inject({ method: 'GET', url: '/api/user/assistants' })).statusCode, 401);
    });

    test('edit and delete rights; editable_others', async () => {
      const other = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
      const otherTok = (await login(t.app, other.email)).accessToken;
      const patch = (token: string, id: string, body: Record<string, unknown>) => t.app.inject({ method: 'PATCH', url: `/api/user/assistant/${id}`, headers: bearer(token), payload: body });
      assert.equal((await patch(otherTok, shared, { name: 'Hijack' })).statusCode, 403);
      assert.equal((await patch(tok.userA1!, shared, { editable_others: true })).statusCode, 200);
      const edited = await patch(otherTok, shared, { description: 'improved' });
      assert.equal(edited.statusCode, 200, edited.body);
      assert.equal(edited.json().data.description, 'improved');
      assert.equal((await patch(otherTok, shared, { admin_only: true })).statusCode, 403);
      // an editor who is not the owner may not hide or lock it, and the refused change is not saved
      for (const flags of [{ institution_shared: false, instructions: 'changed by a member' }, { editable_others: false }]) {
        const refused = await patch(otherTok, shared, flags);
        assert.equal(refused.statusCode, 403, refused.body);
        assert.match(refused.json().message, /institution_shared or editable_others/u);
      }
      const kept = (await get(tok.userA1!, shared)).json().data;
      assert.deepEqual([kept.institution_shared, kept.editable_others, kept.instructions === 'changed by a member'], [true, true, false]);
      // the same values as now are no change
      assert.equal((await patch(otherTok, shared, { institution_shared: true, editable_others: true })).statusCode, 200);
      assert.equal((await patch(tok.adminA1!, privateOne, { history_count: 3 })).json().data.history_count, 3);
      assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/user/assistant/${shared}`, headers: bearer(otherTok) })).statusCode, 403);
      const temp = (await create(otherTok, { name: 'Temp' })).json().data._id;
      assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/user/assistant/${temp}`, headers: bearer(otherTok) })).statusCode, 200);
      assert.equal((await get(otherTok, temp)).statusCode, 404);
    });

    test('likes count once per user and can be taken back', async () => {
      const like = (token: string, body?: Record<string, unknown>) => t.app.inject({ method: 'POST', url: `/api/user/assistant/${system}/like`, headers: bearer(token), ...(body ? { payload: body } : {}) });
      assert.equal((await like(tok.userA1!)).json().liked_count, 1);
      assert.equal((await like(tok.userA1!)).json().liked_count, 1);
      const results = await Promise.all([like(tok.adminA1!), like(tok.adminA1!), like(tok.adminA1!)]);
      assert.deepEqual(results.map((r) => r.statusCode), [200, 200, 200]);
      assert.equal((await get(tok.userA1!, system)).json().data.liked_count, 2);
      assert.equal((await get(tok.userA1!, system)).json().data.liked, true);
      assert.equal((await like(tok.userA1!, { like: false })).json().liked_count, 1);
      assert.equal((await like(tok.userA1!, { like: false })).json().liked_count, 1);
      assert.equal((await like(tok.userB1!)).statusCode, 404);
    });

    test('admin listing: envelope, filters, minimum, scoping per admin role', async () => {
      const list = (token: string, body: Record<string, unknown> = {}) => t.app.inject({ method: 'POST', url: '/api/admin/assistants', headers: { 'x-access-token': token }, payload: body });
      const all = await list(tok.superadmin!);
      assert.equal(all.statusCode, 200, all.body);
      const total = all.json().total;
      assert.ok(total >= 4);
      assert.deepEqual((await list(tok.superadmin!, { system_only: true })).json().data.map((a: any) => a.name), ['System tutor']);
      assert.deepEqual((await list(tok.superadmin!, { admin_only: true })).json().data.map((a: any) => a.name), ['Admins only']);
      const minimal = (await list(tok.superadmin!, { minimum: true, pageSize: 1 })).json();
      assert.deepEqual(Object.keys(minimal.data[0]).sort(), ['_id', 'institution', 'name']);
      assert.equal(minimal.hasMore, true);
      assert.deepEqual((await list(tok.superadmin!, { usersearch: w.adminA1.email.toUpperCase() })).json().data.map((a: any) => a.name), ['Admins only']);
      assert.equal((await list(tok.superadmin!, { usersearch: '_' })).json().total, 0);
      assert.equal((await list(tok.superadmin!, { account: w.accountB.id })).json().total, 0);
      assert.equal((await list(tok.accountAdminA!)).json().total, total);
      assert.equal((await list(tok.adminA1!, { institution: w.a1.id })).json().total, total);
      assert.equal((await list(tok.accountAdminB!)).json().total, 0);
      assert.equal((await list(tok.userA1!)).statusCode, 403);
      assert.equal((await list(tok.superadmin!, { pageSize: 5001 })).statusCode, 400);
      assert.equal((await list(tok.superadmin!, { page: 0 })).statusCode, 400);
      assert.equal((await list(tok.superadmin!, { limitsearch: 2 })).json().pageSize, 2);
    });
  });

  test("what a superadmin owns (its records' feedback, its personal assistants) is listed to superadmins only; usersearch is matched with its spaces", async () => {
    const feedbacks = (token: string, body: Record<string, unknown> = {}) => t.app.inject({ method: 'POST', url: '/api/admin/feedbacks', headers: { 'x-access-token': token }, payload: body });
    const assistants = (token: string, body: Record<string, unknown> = {}) => t.app.inject({ method: 'POST', url: '/api/admin/assistants', headers: { 'x-access-token': token }, payload: body });
    // the superadmin's home account is A: a personal record with feedback, one asked in a1, a personal assistant and one in a1
    const s = { userId: w.superadmin.id, accountId: w.accountA.id };
    await record('root personal question', { ...s, institutionId: null, minutes: 20, feedback: 'root: internal note' });
    await record('root question in a1', { ...s, institutionId: w.a1.id, minutes: 21, thumbUpDown: 'down' });
    const mine = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(tok.superadmin!), payload: { name: 'Root private helper', instructions: 'operator runbook', institution: null } });
    assert.equal(mine.statusCode, 201, mine.body);
    const inA1 = await t.app.inject({ method: 'POST', url: '/api/user/assistant', headers: bearer(tok.superadmin!), payload: { name: 'Root helper for a1', instructions: 'x', institution: w.a1.id, institution_shared: true } });
    assert.equal(inA1.statusCode, 201, inA1.body);
    const rootFeedback = (token: string) => feedbacks(token, { pageSize: 5000 }).then((r) => r.json().data.filter((f: any) => f.user._id === w.superadmin.id).map((f: any) => f.in.input).sort());
    const rootAssistants = (token: string) => assistants(token, { pageSize: 5000 }).then((r) => r.json().data.filter((a: any) => a.name.startsWith('Root ')).map((a: any) => a.name).sort());
    assert.deepEqual(await rootFeedback(tok.superadmin!), ['root personal question', 'root question in a1']);
    assert.deepEqual(await rootAssistants(tok.superadmin!), ['Root helper for a1', 'Root private helper']);
    // a plain member's record with feedback in a1, beside them: the admins' listing is not merely empty
    await record('member question in a1', { userId: w.userA1.id, accountId: w.accountA.id, institutionId: w.a1.id, minutes: 22, feedback: 'member note' });
    for (const admin of ['accountAdminA', 'adminA1'] as const) {
      assert.deepEqual(await rootFeedback(tok[admin]!), [], admin);
      const listed = (await feedbacks(tok[admin]!, { pageSize: 5000 })).json().data.map((f: any) => f.in.input);
      assert.equal(listed.includes('member question in a1'), true, `${admin} lists the member's feedback record`);
      // an assistant a superadmin made in an institution is the institution's
      assert.deepEqual(await rootAssistants(tok[admin]!), ['Root helper for a1'], admin);
    }
    // usersearch is a literal substring, spaces included (every test user is "Test User"); a blank one is no filter
    assert.equal((await assistants(tok.superadmin!, { usersearch: ' User' })).json().total, 0);
    assert.equal((await feedbacks(tok.superadmin!, { usersearch: ' User' })).json().total, 0);
    assert.equal((await feedbacks(tok.superadmin!, { usersearch: 'User' })).json().total, (await feedbacks(tok.superadmin!)).json().total, 'without the space, every asker');
    assert.equal((await feedbacks(tok.superadmin!, { usersearch: '   ' })).json().total, (await feedbacks(tok.superadmin!)).json().total);
  });
});
