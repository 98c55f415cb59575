import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { vector } from '@electric-sql/pglite-pgvector';

/**
 * Migrations that move data, run on a database holding data in the shape before them (the test
 * template is migrated empty, so it never sees this).
 */
const DIR = join(import.meta.dirname, '..', 'src', 'db', 'migrations');
const journal = JSON.parse(readFileSync(join(DIR, 'meta', '_journal.json'), 'utf8')) as { entries: Array<{ tag: string }> };
const tags = journal.entries.map((e) => e.tag);

async function apply(pg: PGlite, tag: string): Promise<void> {
  for (const statement of readFileSync(join(DIR, `${tag}.sql`), 'utf8').split('--> statement-breakpoint')) {
    if (statement.trim()) await pg.exec(statement);
  }
}

/** A fresh database migrated up to (not including) `tag`, handed to `body`, then closed; `body` gets the index of `tag`. */
async function beforeMigration(tag: string, body: (pg: PGlite, at: number) => Promise<void>): Promise<void> {
  const pg = await PGlite.create({ extensions: { vector, pg_trgm } });
  try {
    const at = tags.indexOf(tag);
    assert.ok(at > 0, `${tag} is in the journal`);
    for (const earlier of tags.slice(0, at)) await apply(pg, earlier);
    await body(pg, at);
  } finally {
    await pg.close();
  }
}

const vectorText = (dims: number, seed: number) => `[${Array.from({ length: dims }, (_, i) => ((i * 7 + seed) % 13) / 16 - 0.375).join(',')}]`;

for (const dims of [384, 3]) {
  test(`0009 moves every vector (vector(${dims})${dims === 384 ? '' : ', its index dropped by an unfinished re-embed'}) to chunk_vectors and every chunk's mentions to one row in rank order`, async () => {
    const pg = await PGlite.create({ extensions: { vector, pg_trgm } });
    try {
      const at = tags.indexOf('0009_vectors_staged_mentions_per_chunk');
      assert.ok(at > 0);
      for (const tag of tags.slice(0, at)) await apply(pg, tag);
      // a re-embed may have resized the column before this migration; one that stopped half-way (here) also
      // left the index dropped
      if (dims !== 384) await pg.exec(`drop index chunks_embedding_hnsw; alter table chunks alter column embedding type vector(${dims})`);
      await pg.exec(`set session_replication_role = replica`); // no foreign-key checks: chunks of an upload that is not there
      await pg.query(
        `insert into chunks (id, upload_id, chunk_index, text, tokens, embedding) values
           ('c1', 'u1', 0, 'one', 1, $1::vector), ('c2', 'u1', 1, 'two', 1, $2::vector), ('c3', 'u2', 0, 'three', 1, null)`,
        [vectorText(dims, 1), vectorText(dims, 2)],
      );
      await pg.exec(`insert into kg_mentions (chunk_id, upload_id, name, kind, tf, rank) values
        ('c1', 'u1', 'wing', 'phrase', 2, 2), ('c1', 'u1', 'NACA', 'acronym', 1, 1), ('c1', 'u1', '5 m', 'quantity', 3, 3),
        ('c2', 'u1', 'flutter', 'phrase', 1, 1)`);
      await pg.exec(`set session_replication_role = origin`);
      const before = (await pg.query<{ id: string; v: string }>(`select id, embedding::text as v from chunks where embedding is not null order by id`)).rows;

      await apply(pg, tags[at]!);

      const moved = (await pg.query<{ id: string; u: string; v: string }>(`select chunk_id as id, upload_id as u, embedding::text as v from chunk_vectors order by chunk_id`)).rows;
      assert.deepEqual(
        moved,
        before.map((b) => ({ id: b.id, u: 'u1', v: b.v })),
      );
      const [typ] = (await pg.query<{ t: string }>(`select format_type(atttypid, atttypmod) as t from pg_attribute where attrelid = 'chunk_vectors_staged'::regclass and attname = 'embedding'`)).rows;
      assert.equal(typ!.t, `vector(${dims})`);
      assert.equal((await pg.query(`select 1 from chunk_vectors_staged`)).rows.length, 0);
      assert.equal((await pg.query(`select 1 from pg_attribute where attrelid = 'chunks'::regclass and attname = 'embedding' and not attisdropped`)).rows.length, 0);
      assert.equal((await pg.query(`select 1 from pg_indexes where indexname = 'chunk_vectors_hnsw'`)).rows.length, 1);
      const mentions = (await pg.query(`select chunk_id, upload_id, names, kinds, tf from kg_mentions order by chunk_id`)).rows;
      assert.deepEqual(mentions, [
        { chunk_id: 'c1', upload_id: 'u1', names: ['NACA', 'wing', '5 m'], kinds: ['acronym', 'phrase', 'quantity'], tf: [1, 2, 3] },
        { chunk_id: 'c2', upload_id: 'u1', names: ['flutter'], kinds: ['phrase'], tf: [1] },
      ]);
      // deleting a chunk takes its vector and its mentions with it
      await pg.exec(`delete from chunks where id = 'c1'`);
      assert.deepEqual((await pg.query(`select chunk_id from chunk_vectors union all select chunk_id from kg_mentions`)).rows, [{ chunk_id: 'c2' }, { chunk_id: 'c2' }]);
    } finally {
      await pg.close();
    }
  });
}

test('0010 puts every graph edge in code point order; a pair held both ways keeps its code point row', async () => {
  await beforeMigration('0010_graph_edges_code_point_order', async (pg, at) => {
    await pg.exec(`set session_replication_role = replica`);
    // before 0009 a database in en_US order stored (éclair, zebra); in code point order é (U+00E9) comes after z.
    // u1: only the old row. u2: the old row and the row a chunk edit recomputed since (its weight is the true one).
    // u3: a pair already in code point order, left as it is.
    await pg.exec(`insert into kg_edges (upload_id, a, b, weight) values
      ('u1', 'éclair', 'zebra', 2),
      ('u2', 'éclair', 'zebra', 2), ('u2', 'zebra', 'éclair', 3),
      ('u3', 'NACA', 'wing', 4)`);
    await pg.exec(`set session_replication_role = origin`);
    await apply(pg, tags[at]!);
    const rows = (await pg.query(`select upload_id, a, b, weight from kg_edges order by upload_id`)).rows;
    assert.deepEqual(rows, [
      { upload_id: 'u1', a: 'zebra', b: 'éclair', weight: 2 },
      { upload_id: 'u2', a: 'zebra', b: 'éclair', weight: 3 },
      { upload_id: 'u3', a: 'NACA', b: 'wing', weight: 4 },
    ]);
  });
});

test('0015 keeps each upload\'s edges as one list per first entity (neighbours in code point order), still one row an edge through kg_edges', async () => {
  await beforeMigration('0015_graph_edges_as_lists', async (pg, at) => {
    await pg.exec(`insert into kg_edges (upload_id, a, b, weight) values
      ('u1', 'a', 'é', 2), ('u1', 'a', 'b', 1), ('u1', 'a', 'z', 5), ('u1', 'b', 'c', 3), ('u2', 'x', 'y', 4)`);
    await apply(pg, tags[at]!);
    assert.deepEqual((await pg.query(`select upload_id, a, bs, ws from kg_edge_lists order by upload_id, a`)).rows, [
      { upload_id: 'u1', a: 'a', bs: ['b', 'z', 'é'], ws: [1, 5, 2] },
      { upload_id: 'u1', a: 'b', bs: ['c'], ws: [3] },
      { upload_id: 'u2', a: 'x', bs: ['y'], ws: [4] },
    ]);
    assert.deepEqual((await pg.query(`select upload_id, a, b, weight from kg_edges order by upload_id, a, b collate "C"`)).rows, [
      { upload_id: 'u1', a: 'a', b: 'b', weight: 1 },
      { upload_id: 'u1', a: 'a', b: 'z', weight: 5 },
      { upload_id: 'u1', a: 'a', b: 'é', weight: 2 },
      { upload_id: 'u1', a: 'b', b: 'c', weight: 3 },
      { upload_id: 'u2', a: 'x', b: 'y', weight: 4 },
    ]);
  });
});

test('0011 records the reservations left open before it (a reserve without a release), so that the sweep ends them', async () => {
  await beforeMigration('0011_credit_reservations', async (pg, at) => {
    await pg.exec(`set session_replication_role = replica`); // ledger rows of holders that are not there
    await pg.exec(`insert into credit_ledger (id, account_id, institution_id, delta, kind, actor_user_id, ref_id, created_at) values
      ('l1', 'a1', 'i1', -2, 'reserve', 'u1', 'open-1', '2026-01-01T00:00:00Z'),
      ('l2', 'a1', 'i1', -1, 'reserve', 'u1', 'open-1', '2026-01-01T00:01:00Z'),
      ('l3', 'a1', 'i1', -1, 'reserve', 'u1', 'done-1', '2026-01-01T00:00:00Z'),
      ('l4', 'a1', 'i1', 1, 'release', 'u1', 'done-1', '2026-01-01T00:02:00Z'),
      ('l5', 'a1', 'i1', -0.5, 'charge', 'u1', 'done-1', '2026-01-01T00:02:00Z')`);
    await apply(pg, tags[at]!); // still without foreign-key checks: the holders are not there
    await pg.exec(`set session_replication_role = origin`);
    const rows = (await pg.query(`select ref_id, institution_id, user_id, actor_user_id, amount::text as amount, updated_at::text as at from credit_reservations`)).rows;
    assert.deepEqual(rows, [{ ref_id: 'open-1', institution_id: 'i1', user_id: null, actor_user_id: 'u1', amount: '3.0000', at: '2026-01-01 00:01:00+00' }]);
  });
});

test("0016: a user's assistants go with the user; ownerless rows already there (system or orphaned, indistinguishable) stay", async () => {
  await beforeMigration('0016_assistants_follow_their_owner', async (pg, at) => {
    await pg.exec(`insert into accounts (id, name) values ('acc', 'Acme');
      insert into users (id, account_id, email, password_hash) values
        ('u1', 'acc', 'u1@acme.test', 'x'), ('u2', 'acc', 'u2@acme.test', 'x'), ('u3', 'acc', 'u3@acme.test', 'x');
      insert into assistants (id, account_id, owner_user_id, name) values
        ('system', 'acc', null, 'made ownerless'), ('of-u1', 'acc', 'u1', 'u1 private'), ('of-u2', 'acc', 'u2', 'u2 private')`);
    // before: deleting a user left their assistant ownerless, that is a system assistant
    await pg.exec(`delete from users where id = 'u2'`);
    assert.deepEqual((await pg.query(`select id, owner_user_id from assistants order by id`)).rows, [
      { id: 'of-u1', owner_user_id: 'u1' },
      { id: 'of-u2', owner_user_id: null },
      { id: 'system', owner_user_id: null },
    ]);
    await apply(pg, tags[at]!);
    assert.deepEqual((await pg.query(`select id from assistants order by id`)).rows, [{ id: 'of-u1' }, { id: 'of-u2' }, { id: 'system' }], 'no row removed');
    await pg.exec(`insert into histories (id, user_id, account_id, assistant_id, success) values
      ('h1', 'u1', 'acc', 'of-u1', true), ('h3', 'u3', 'acc', 'of-u1', true)`);
    await pg.exec(`delete from users where id = 'u1'`);
    assert.deepEqual((await pg.query(`select id from assistants order by id`)).rows, [{ id: 'of-u2' }, { id: 'system' }]);
    // the user's own record went with the user; another user's record made with the assistant stays, without it
    assert.deepEqual((await pg.query(`select id, assistant_id from histories`)).rows, [{ id: 'h3', assistant_id: null }]);
  });
});

test('0017 puts names and e-mails of accounts, institutions and users in NFC; an e-mail that would then equal another user\'s stays as it is', async () => {
  await beforeMigration('0017_names_and_emails_in_nfc', async (pg, at) => {
    const d = (s: string) => s.normalize('NFD');
    await pg.query(`insert into accounts (id, name, manager_email) values ('acc', $1, $2), ('plain', 'Plain', null)`, [d('Café Numérique'), d('josé@café.test')]);
    await pg.query(`insert into institutions (id, account_id, public_id, name, ainame, contact_email) values ('i1', 'acc', '00000000-0000-4000-8000-000000000001', $1, $2, $3)`, [d('Santé'), d('Hélène'), d('zoé@café.test')]);
    await pg.query(
      `insert into users (id, account_id, email, password_hash, fname, lname) values
         ('u1', 'acc', $1, 'x', $2, $3), ('u2', 'acc', $4, 'x', '', ''), ('u3', 'acc', $5, 'x', '', '')`,
      [d('inès@café.test'), d('Inès'), d('Brézillon'), 'Zoé@café.test', d('zoé@CAFÉ.test')],
    );
    await apply(pg, tags[at]!);
    assert.deepEqual((await pg.query(`select id, name, manager_email from accounts order by id`)).rows, [
      { id: 'acc', name: 'Café Numérique', manager_email: 'josé@café.test' },
      { id: 'plain', name: 'Plain', manager_email: null },
    ]);
    assert.deepEqual((await pg.query(`select name, ainame, contact_email from institutions`)).rows, [{ name: 'Santé', ainame: 'Hélène', contact_email: 'zoé@café.test' }]);
    assert.deepEqual((await pg.query(`select id, email, fname, lname from users order by id`)).rows, [
      { id: 'u1', email: 'inès@café.test', fname: 'Inès', lname: 'Brézillon' },
      { id: 'u2', email: 'Zoé@café.test', fname: '', lname: '' },
      { id: 'u3', email: d('zoé@CAFÉ.test'), fname: '', lname: '' }, // would collide with u2: kept for an admin to change
    ]);
  });
});
