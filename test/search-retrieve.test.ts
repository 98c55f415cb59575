import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/pglite';
import type { PGlite } from '@electric-sql/pglite';
import * as schema from '../src/db/schema.js';
import { rowsOf, type Db } from '../src/db/client.js';
import { resolveAuth } from '../src/modules/identity/auth-context.js';
import { regraphAll } from '../src/modules/search/regraph.js';
import { exclusionsOf, rankLists, retrieve } from '../src/modules/search/retrieve.js';
import { cosinesOf } from '../src/modules/search/search.repository.js';
import { packVector } from '../src/modules/search/vectors.js';
import { bearer, login, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * The retrieval library as the Q&A pipeline calls it (`retrieve(ctx, auth, query, options)`), and the
 * `regraph` rebuild, on the real app and database.
 */
let t: TestApp;
let token: string;
const ids: Record<string, string> = {};

const authOf = () => resolveAuth(t.app.ctx.db, t.app.ctx.tokens, token, new Date(), t.app.ctx.auth);

before(async () => {
  t = await startTestApp();
  const w = await makeWorld(t.database);
  token = (await login(t.app, w.userA1.email)).accessToken;
  const parent = await t.app.inject({ method: 'POST', url: '/api/user/collection', headers: bearer(token), payload: { name: 'Course', scope: 'personal' } });
  assert.equal(parent.statusCode, 201, parent.body);
  ids.parent = parent.json().data._id;
  const child = await t.app.inject({ method: 'POST', url: '/api/user/collection', headers: bearer(token), payload: { name: 'Week 1', scope: 'personal', parent: ids.parent } });
  assert.equal(child.statusCode, 201, child.body);
  ids.child = child.json().data._id;
  const files: Array<[string, string, Record<string, string>]> = [
    ['inChild', 'Photosynthesis turns light into chemical energy inside the chloroplasts of Elodea leaves.', { scope: 'personal', collection: ids.child! }],
    ['outside', 'Photosynthesis in desert succulents follows the CAM pathway at night.', { scope: 'personal' }],
  ];
  for (const [name, text, fields] of files) {
    const u = await uploadOk(t.app, token, { name: `${name}.txt`, content: text, type: 'text/plain' }, fields);
    assert.equal((await waitForIngestion(t.app, token, u._id)).status, 'active');
    ids[name] = u._id;
  }
});

after(() => t.close());

test('retrieve returns full chunk text, snippet, score, source and the upload; collectionIds include sub-collections', async () => {
  const auth = await authOf();
  const all = await retrieve(t.app.ctx, auth, 'photosynthesis', { limit: 5 });
  assert.deepEqual(new Set(all.results.map((r) => r.uploadId)), new Set([ids.inChild, ids.outside]));
  assert.equal(all.uploadCount, 2);
  const scoped = await retrieve(t.app.ctx, auth, 'photosynthesis', { limit: 5, collectionIds: [ids.parent!] });
  assert.deepEqual(scoped.results.map((r) => r.uploadId), [ids.inChild]);
  assert.equal(scoped.uploadCount, 1);
  const hit = scoped.results[0]!;
  assert.equal(hit.text, 'Photosynthesis turns light into chemical energy inside the chloroplasts of Elodea leaves.');
  assert.equal(hit.chunkIndex, 0);
  assert.equal(hit.upload._id, ids.inChild);
  assert.ok(['rag', 'kag', 'fused'].includes(hit.source) && hit.score > 0 && hit.score <= 1 && hit.snippet.length > 0);
  assert.equal(typeof scoped.tookMs, 'number');
  const none = await retrieve(t.app.ctx, auth, 'photosynthesis', { limit: 5, collectionIds: ['not-a-uuid'] });
  assert.equal(none.results.length, 0);
  assert.equal(none.uploadCount, 0);
});

const graphRows = async () => ({
  mentions: await rowsOf(t.database.db, sql`select chunk_id, upload_id, names, kinds, tf from kg_mentions order by chunk_id`),
  entities: await rowsOf(t.database.db, sql`select upload_id, name, kind, chunk_count from kg_entities order by upload_id, name`),
  edges: await rowsOf(t.database.db, sql`select upload_id, a, b, weight from kg_edges order by upload_id, a, b`),
});

test('the lexical list is the neighbour expansion\'s: query-likelihood scores reported as exp(s − max s), the best exactly 1', async () => {
  const auth = await authOf();
  const ranked = await rankLists(t.app.ctx, auth, 'photosynthesis energy', { limit: 5, methods: ['lexical'] });
  const lexical = ranked.lists.lexical!;
  assert.equal(new Set(lexical.map((r) => r.id)).size, 2);
  // BM25 scores (what the list held before the expansion) are sums of idf-weighted parts, not 1 at the top
  assert.equal(lexical[0]!.score, 1);
  assert.ok(lexical[1]!.score > 0 && lexical[1]!.score < 1, String(lexical[1]!.score));
  assert.equal(ranked.lists.dense, undefined);
});

test('regraph rebuilds a graph that is missing, the same graph as ingestion wrote (its entities found in the sandbox)', async () => {
  const ingested = await graphRows();
  assert.ok(ingested.mentions.length > 0 && ingested.entities.length > 0 && ingested.edges.length > 0);
  await t.database.db.execute(sql`delete from kg_entities`);
  await t.database.db.execute(sql`delete from kg_edge_lists`);
  await t.database.db.execute(sql`delete from kg_mentions`);
  // as every writer of graph rows does (refreshUploadIndex): a new version, so no copy held in memory is used
  await t.database.db.execute(sql`update upload_index_stats set version = nextval('upload_index_version')`);
  const before = await retrieve(t.app.ctx, await authOf(), 'Elodea', { limit: 5, methods: ['kag'] });
  assert.equal(before.results.length, 0);
  const r = await regraphAll(t.database.db);
  assert.equal(r.uploads, 2);
  const [n] = await rowsOf<{ n: number }>(t.database.db, sql`select count(*)::int as n from kg_entities where upload_id = ${ids.inChild!}`);
  assert.ok(Number(n!.n) > 0);
  const after = await retrieve(t.app.ctx, await authOf(), 'Elodea', { limit: 5, methods: ['kag'] });
  assert.deepEqual(after.results.map((r) => r.uploadId), [ids.inChild]);
  assert.deepEqual(await graphRows(), ingested);
});

test('the rows of the lexical list\'s head are read while the graph side is scored; a result outside them is read after the fusion', async () => {
  const auth = await authOf();
  const sent: Array<{ query: string; params: unknown[] }> = [];
  const db = drizzle(t.database.pglite as PGlite, { schema, logger: { logQuery: (query, params) => void sent.push({ query, params }) } }) as unknown as Db;
  const ctx = { ...t.app.ctx, db };
  // the ids a statement reads chunks by (a text[] literal, src/db/search.ts textArray)
  const chunkReads = () =>
    sent.filter((s) => /from chunks c where c\.id = any/.test(s.query)).map((s) => [...String(s.params.find((p) => /^\{.*\}$/.test(String(p)))).matchAll(/"([^"]+)"/g)].map((m) => m[1]!));
  const chunkOf = async (uploadId: string) => (await rowsOf<{ id: string }>(t.database.db, sql`select id from chunks where upload_id = ${uploadId}`)).map((r) => r.id);
  const both = [...(await chunkOf(ids.inChild!)), ...(await chunkOf(ids.outside!))];
  // one result asked for: the read ahead took the lexical list's head (both chunks), and nothing was read after
  const one = await retrieve(ctx, auth, 'photosynthesis', { limit: 1 });
  assert.deepEqual(chunkReads().map((read) => new Set(read)), [new Set(both)]);
  // the result is the one the lexical side ranked first, with its own text, file and cosine
  assert.equal(one.results.length, 1);
  const hit = one.results[0]!;
  const [first] = (await rankLists(t.app.ctx, auth, 'photosynthesis', { limit: 1, methods: ['lexical'] })).lists.lexical!;
  assert.equal(hit.chunkId, first!.id);
  const [row] = await rowsOf<{ text: string; upload_id: string }>(t.database.db, sql`select text, upload_id from chunks where id = ${hit.chunkId}`);
  assert.deepEqual([hit.text, hit.uploadId, hit.upload._id], [row!.text, row!.upload_id, row!.upload_id]);
  const cosine = await cosinesOf(t.database.db, [hit.chunkId], packVector((await t.app.ctx.providers.embedder.embed(['photosynthesis']))[0]!, t.app.ctx.providers.embedder.dimensions));
  assert.equal(hit.denseScore, Math.round(cosine.get(hit.chunkId)! * 1e6) / 1e6);
  // only the graph side: nothing is read ahead, the result's row is read after the fusion
  sent.length = 0;
  const kag = await retrieve(ctx, auth, 'Elodea', { limit: 5, methods: ['kag'] });
  assert.deepEqual(kag.results.map((r) => [r.uploadId, r.source]), [[ids.inChild, 'kag']]);
  assert.equal(kag.results[0]!.text, 'Photosynthesis turns light into chemical energy inside the chloroplasts of Elodea leaves.');
  assert.deepEqual(chunkReads(), [await chunkOf(ids.inChild!)]);
});

test('a query with an exclusion asks for its websearch_to_tsquery with its lexemes, before the scope and the dense search', async () => {
  const auth = await authOf();
  const sent: string[] = [];
  const db = drizzle(t.database.pglite as PGlite, { schema, logger: { logQuery: (query) => void sent.push(query) } }) as unknown as Db;
  const ctx = { ...t.app.ctx, db };
  await retrieve(ctx, auth, 'photosynthesis', { limit: 5 }); // the scope is held from here on
  sent.length = 0;
  const r = await retrieve(ctx, auth, 'photosynthesis -CAM', { limit: 5, methods: ['lexical'] });
  assert.deepEqual(r.results.map((x) => x.uploadId), [ids.inChild]);
  const kinds = sent.map((q) =>
    /unnest\(to_tsvector/.test(q) ? 'lexemes' : /websearch_to_tsquery/.test(q) ? 'operators' : /from uploads u left join upload_index_stats/.test(q) ? 'scope' : /<=>/.test(q) ? 'dense' : 'other',
  );
  assert.deepEqual(kinds.slice(0, 3), ['lexemes', 'operators', 'scope']);
  sent.length = 0;
  await retrieve(ctx, auth, 'photosynthesis -CAM', { limit: 5 });
  const order = sent.map((q) => (/websearch_to_tsquery/.test(q) ? 'operators' : /<=>/.test(q) ? 'dense' : 'other'));
  assert.ok(order.indexOf('operators') >= 0 && order.indexOf('operators') < order.indexOf('dense'), order.join(' '));
});

test('minScore on results that only the lexical side found: their cosine is read for the filter', async () => {
  const auth = await authOf();
  // without the dense list no cosine comes with the results: the filter reads them
  const all = await retrieve(t.app.ctx, auth, 'photosynthesis', { limit: 5, methods: ['lexical'], minScore: 0 });
  assert.deepEqual(all.results.map((r) => r.source), ['rag', 'rag']);
  const [low, high] = all.results.map((r) => r.denseScore!).sort((a, b) => a - b);
  assert.ok(low! < high!, JSON.stringify(all.results.map((r) => r.denseScore)));
  const filtered = await retrieve(t.app.ctx, auth, 'photosynthesis', { limit: 5, methods: ['lexical'], minScore: (low! + high!) / 2 });
  assert.deepEqual(filtered.results.map((r) => r.denseScore), [high]);
  assert.equal(filtered.totalScanned, 2);
});

test("a query's -exclusions are read as websearch_to_tsquery reads them", () => {
  assert.equal(exclusionsOf('guild -hemlock'), 'hemlock');
  assert.equal(exclusionsOf('-hemlock guild -"northern coast" -salt'), 'hemlock or "northern coast" or salt');
  assert.equal(exclusionsOf('-"an open phrase'), '"an open phrase');
  // a dash inside a word, a lone dash, a dash before punctuation only: no exclusion
  for (const query of ['x-ray crystallography', 'flow - separation', 'a --', 'guild', '-- -"" -!']) assert.equal(exclusionsOf(query), undefined, query);
});
