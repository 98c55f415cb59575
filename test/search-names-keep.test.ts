import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { rowsOf, type Database } from '../src/db/client.js';
import { writeIndexedChunks } from '../src/modules/search/indexing.js';
import type { Mention } from '../src/modules/search/graph.js';
import { refreshUploadIndex } from '../src/modules/search/search.repository.js';
import { SegmentCache } from '../src/modules/search/segments.js';
import { packVector } from '../src/modules/search/vectors.js';
import { insertUpload } from '../src/modules/vault/uploads.repository.js';
import { LocalEmbedder } from '../src/providers/embeddings/index.js';
import { newId } from '../src/shared/ids.js';
import { makeWorld, openTestDatabase } from './support/app.js';

/**
 * SegmentCache.similarEntities answers "entity names of the scope's segments" from the trigram dictionary every held
 * segment shares; when the scope holds every held segment it takes every dictionary name as in scope. keep() adds a
 * new segment's names a slice at a time, yielding to the event loop, before the segment is held: while a file just
 * ingested (the index warmer) or just edited (a new version) is being kept, another tenant's search whose scope held
 * every other segment matched that file's names as its own (retrieve.ts: correctUnknown rewrote the query with them,
 * graphEntities weighed them). The shortcut now waits for no keep() to be running.
 */
let database: Database;
const embedder = new LocalEmbedder(384);
let world: Awaited<ReturnType<typeof makeWorld>>;

async function addUpload(owner: { id: string; accountId: string }, chunks: Array<{ text: string; mentions: Mention[] }>): Promise<string> {
  const db = database.db;
  const id = newId();
  await insertUpload(db, { id, originalname: 'f.txt', filesize: 1, mimetype: 'text/plain', scope: 'personal', ownerUserId: owner.id, accountId: owner.accountId, status: 'processing', storageKey: id, sha256: id });
  for (let i = 0; i < chunks.length; i += 200) {
    const batch = chunks.slice(i, i + 200);
    const vectors = await embedder.embed(batch.map((c) => c.text));
    await writeIndexedChunks(
      db,
      id,
      batch.map((c, j) => ({ id: newId(), index: i + j, text: c.text, heading: null, tokens: 10, mentions: c.mentions, embedding: packVector(vectors[j]!, 384) })),
      new Date(),
    );
  }
  await refreshUploadIndex(db, id);
  await db.execute(sql`update uploads set status = 'active' where id = ${id}`);
  return id;
}

const scopeOf = async (ids: string[]) =>
  (
    await rowsOf<{ id: string; chunks: number; version: string }>(
      database.db,
      sql`select upload_id as id, chunks, version from upload_index_stats where upload_id = any(${`{${ids.join(',')}}`}::text[])`,
    )
  ).map((r) => ({ id: r.id, chunks: Number(r.chunks), version: Number(r.version) }));

let uploadA: string;
let uploadB: string;
const TARGET = 'aaa zorblaxian institute';

before(async () => {
  database = await openTestDatabase();
  world = await makeWorld(database);
  // tenant A's file: one entity, nothing like the target
  uploadA = await addUpload(world.userA1, [{ text: 'Boundary layer notes by Ada Lovelace.', mentions: [{ name: 'ada lovelace', kind: 'name', tf: 1, rank: 1 }] }]);
  // tenant B's file: the target name (first in code point order, so kept first) and many other names, so that
  // keeping it takes several slices
  const chunks: Array<{ text: string; mentions: Mention[] }> = [];
  let n = 0;
  for (let c = 0; c < 400; c++) {
    const mentions: Mention[] = [];
    if (c === 0) mentions.push({ name: TARGET, kind: 'name', tf: 1, rank: 1 });
    for (let k = 0; k < 60; k++) {
      n++;
      mentions.push({ name: `zz filler ${n.toString(36)} ${(n * 7919).toString(36)}`, kind: 'phrase', tf: 1, rank: mentions.length + 1 });
    }
    chunks.push({ text: `chunk ${c} of tenant B`, mentions });
  }
  uploadB = await addUpload(world.userB1, chunks);
});

after(() => database.close());

test("similarEntities over tenant A's scope never returns tenant B's names, even while B's new segment is being kept", async () => {
  const cache = new SegmentCache(256 * 1024 * 1024);
  const [scopeA] = [await scopeOf([uploadA])];
  const segmentsA = await cache.segmentsOf(database.db, scopeA);
  // A's own search: nothing like the target in its scope
  assert.deepEqual(cache.similarEntities(segmentsA, 'zorblaxian institut', 0.5, 3), []);

  // B's file is read into memory (the index warmer after its ingestion, or B's first search)
  const scopeB = await scopeOf([uploadB]);
  const keeping = cache.segmentsOf(database.db, scopeB);
  let turns = 0;
  while (!cache.holdsName(TARGET) && turns < 200_000) {
    turns++;
    await new Promise((resolve) => setImmediate(resolve));
  }
  const inWindow = cache.holdsName(TARGET) && !cache.holdsVersion(uploadB, scopeB[0]!.version);
  // A searches meanwhile (its scope holds every segment the cache holds: A's)
  const duringKeep = cache.similarEntities(segmentsA, 'zorblaxian institut', 0.5, 3);
  await keeping;
  assert.ok(inWindow, 'the test reached the window where B\'s names are in the dictionary and B is not held yet');
  assert.deepEqual(
    duringKeep.map((m) => m.name),
    [],
    "a name of tenant B's upload (not in A's scope) was matched for A's search while B's segment was being kept",
  );
  // once B is held, A's scope no longer holds every held segment: the per-name check applies again
  assert.deepEqual(cache.similarEntities(segmentsA, 'zorblaxian institut', 0.5, 3), []);
});
