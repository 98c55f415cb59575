/**
 * Authorization matrix (issue 7, item 3): every route the app registers × every principal → the
 * expected status. Routes are read from the app itself (buildApp's onRoute), rows from
 * test/authz/*.rows.ts (one file per module; see test/authz/README.md). A route without a row fails.
 *
 * Besides the status, every cell checks:
 * - a refusal (≥ 400) carries the contract's error body;
 * - a refused write changed nothing: a trigger on every table logs each row inserted, deleted or
 *   changed, and nothing may be logged during the request (the record it aimed at, and anything else);
 * - no answer to a principal outside account A contains a marker of account A's records, and no
 *   answer to the member of A2 contains a marker of A1's instance and personal records.
 * HEAD routes that Fastify adds for each GET are checked against the GET row's expectations.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { sql } from 'drizzle-orm';
import {
  buildWorld,
  CANARY_A,
  CANARY_A1,
  PRINCIPALS,
  type Cell,
  type PrincipalName,
  type Row,
  type World,
} from './authz/fixture.js';

const here = dirname(fileURLToPath(import.meta.url));
const rowsDir = join(here, 'authz');

async function loadRows(): Promise<Array<Row & { file: string }>> {
  const out: Array<Row & { file: string }> = [];
  for (const file of readdirSync(rowsDir).filter((f) => f.endsWith('.rows.ts')).sort()) {
    const mod = (await import(pathToFileURL(join(rowsDir, file)).href)) as { rows?: Row[] };
    if (!Array.isArray(mod.rows)) throw new Error(`${file} must export \`rows: Row[]\``);
    for (const row of mod.rows) out.push({ ...row, file });
  }
  return out;
}

const routeKey = (method: string, url: string) => `${method} ${url}`;
const rowName = (row: Row) => (row.variant ? `${row.route} [${row.variant}]` : row.route);

/** Who must never see which marker. */
const FORBIDDEN_MARKERS: Partial<Record<PrincipalName, string[]>> = {
  otherAccountUser: [CANARY_A, CANARY_A1],
  otherAccountAdmin: [CANARY_A, CANARY_A1],
  otherInstitutionMember: [CANARY_A1],
};

function fillTemplate(url: string, params: Record<string, string> = {}): string {
  const value = (name: string) => {
    const v = params[name];
    if (v === undefined) throw new Error(`no value for path parameter ${name} of ${url}`);
    return v;
  };
  // `:name` parameters are one path segment; a trailing `*` (static files) is the rest of the path.
  return url.replace(/:([A-Za-z0-9_]+)/g, (_, name: string) => encodeURIComponent(value(name))).replace(/\*$/, () => value('*'));
}

interface CellResult {
  row: string;
  principal: PrincipalName;
  expected: number;
  status: number;
  problems: string[];
  todo?: string;
}

async function runCell(w: World, row: Row, method: string, url: string, principal: PrincipalName): Promise<CellResult> {
  const expected = row.expect[principal];
  const cell: Cell = { w, principal, expected };
  const req = await row.request(cell);
  const headers: Record<string, string> = { ...w.headersFor(principal, req.token), ...req.headers };
  let payload: string | Buffer | undefined;
  if (req.payload !== undefined) {
    if (Buffer.isBuffer(req.payload) || typeof req.payload === 'string') payload = req.payload;
    else {
      payload = JSON.stringify(req.payload);
      headers['content-type'] ??= 'application/json';
    }
  }
  // Refused writes must change nothing (reads are covered by the leak markers).
  const refusedWrite = expected >= 400 && method !== 'GET' && method !== 'HEAD' && !row.writesOnRefusal;
  const mark = refusedWrite ? await w.writeMark() : 0;
  const res = await w.app.inject({ method: method as 'GET', url: fillTemplate(url, req.params), query: req.query, headers, payload });
  const problems: string[] = [];
  if (res.statusCode !== expected) problems.push(`status ${res.statusCode}, expected ${expected}: ${res.body.slice(0, 300)}`);
  if (res.statusCode >= 400 && method !== 'HEAD') {
    try {
      const body = res.json();
      assert.equal(body.success, false);
      assert.equal(typeof body.message, 'string');
      assert.equal(typeof body.error?.code, 'string');
      assert.ok(Array.isArray(body.error?.details));
    } catch {
      problems.push(`refusal without the contract's error body: ${res.body.slice(0, 200)}`);
    }
  }
  if (refusedWrite && res.statusCode >= 400) {
    const written = await w.writesSince(mark);
    if (written.length > 0) problems.push(`refused with ${res.statusCode} but changed the database: ${written.join(', ')}`);
  }
  for (const marker of row.noLeakCheck ? [] : (FORBIDDEN_MARKERS[principal] ?? [])) {
    if (res.body.includes(marker) || JSON.stringify(res.headers).includes(marker)) problems.push(`answer leaks a record of account A (${marker}): ${res.body.slice(0, 200)}`);
  }
  if (row.check && res.statusCode === expected && expected < 400 && method !== 'HEAD') {
    try {
      await row.check(res, cell);
    } catch (err) {
      problems.push(`check failed: ${(err as Error).message}`);
    }
  }
  return { row: `${method === 'HEAD' ? 'HEAD (of GET) ' : ''}${rowName(row)}`, principal, expected, status: res.statusCode, problems, todo: row.todo?.[principal] };
}

describe('authorization matrix: every route × every principal', () => {
  let w: World;
  let rows: Array<Row & { file: string }>;
  const todos: CellResult[] = [];
  let requests = 0;
  const started = Date.now();

  let worldSeconds = 0;
  before(async () => {
    rows = await loadRows();
    w = await buildWorld();
    worldSeconds = (Date.now() - started) / 1000;
  });
  after(async () => {
    await w?.close();
  });

  test('every registered route has a row, and every row names a registered route', () => {
    const registered = new Set(w.routes.map((r) => routeKey(r.method, r.url)));
    const covered = new Set(rows.map((r) => r.route));
    // HEAD routes Fastify derives from a GET are checked with the GET row.
    const missing = [...registered].filter((k) => !covered.has(k) && !(k.startsWith('HEAD ') && covered.has(`GET ${k.slice(5)}`)));
    assert.deepEqual(missing, [], `routes without a row in test/authz/*.rows.ts (see test/authz/README.md):\n${missing.join('\n')}`);
    const unknown = rows.filter((r) => !registered.has(r.route)).map((r) => `${r.route} (${r.file})`);
    assert.deepEqual(unknown, [], `rows naming no registered route (method + url template exactly as registered):\n${unknown.join('\n')}`);
    const seen = new Set<string>();
    for (const r of rows) {
      const name = rowName(r);
      assert.ok(!seen.has(name), `two rows for ${name}: give them different variants`);
      seen.add(name);
      assert.deepEqual(Object.keys(r.expect).sort(), [...PRINCIPALS].sort(), `${name}: expect must name every principal`);
      for (const p of Object.keys(r.todo ?? {})) assert.ok((PRINCIPALS as readonly string[]).includes(p), `${name}: todo names an unknown principal ${p}`);
    }
  });

  test('each cell answers as expected, refusals change nothing and nothing leaks across tenants', async (t) => {
    const registered = new Set(w.routes.map((r) => routeKey(r.method, r.url)));
    const failures: string[] = [];
    for (const row of rows) {
      const [method, url] = row.route.split(' ') as [string, string];
      const variants: Array<[string, string]> = [[method, url]];
      // HEAD once per GET route (with its first row), unless HEAD has rows of its own.
      const firstOfRoute = rows.find((r) => r.route === row.route) === row;
      if (method === 'GET' && firstOfRoute && registered.has(routeKey('HEAD', url)) && !rows.some((r) => r.route === `HEAD ${url}`)) variants.push(['HEAD', url]);
      for (const [m, u] of variants) {
        for (const principal of PRINCIPALS) {
          let result: CellResult;
          try {
            result = await runCell(w, row, m, u, principal);
          } catch (err) {
            result = { row: rowName(row), principal, expected: row.expect[principal], status: 0, problems: [`request could not be built or sent: ${(err as Error).stack}`], todo: row.todo?.[principal] };
          }
          requests++;
          if (result.todo) todos.push(result);
          else if (result.problems.length > 0) failures.push(`${result.row} × ${principal}: ${result.problems.join('; ')}`);
        }
      }
    }
    t.diagnostic(`${rows.length} rows, ${requests} requests in ${((Date.now() - started) / 1000 - worldSeconds).toFixed(1)} s (and ${worldSeconds.toFixed(1)} s to build the world)`);
    assert.equal(failures.length, 0, `${failures.length} cells differ from the matrix:\n${failures.join('\n')}`);
  });

  test('the no-change check sees a change of one column of one row, and only real changes (it can fail)', async () => {
    const mark = await w.writeMark();
    await w.database.db.execute(sql`update institutions set about = about where id = ${w.a1.id}`);
    await w.database.db.execute(sql`update sessions set last_activity_at = now()`);
    assert.deepEqual(await w.writesSince(mark), [], 'an update that changes nothing (or only a volatile column) is no change');
    await w.database.db.execute(sql`update institutions set about = about || '.' where id = ${w.a1.id}`);
    assert.deepEqual(await w.writesSince(mark), ['institutions']);
  });

  test('cells marked todo (fixes in flight on other branches): expected what issue 7 requires', async (t) => {
    for (const c of todos) {
      const state = c.problems.length === 0 ? 'NOW PASSES: remove the todo' : `today: ${c.problems.join('; ').slice(0, 200)}`;
      // Skipped with the reason and today's answer; the cell is not counted as a failure.
      await t.test(`${c.row} × ${c.principal} → ${c.expected}`, { skip: `TODO ${c.todo} (${state})` }, () => {});
    }
  });
});
