import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { sql } from 'drizzle-orm';
import { buildApp, type App } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { rowsOf } from '../src/db/client.js';
import { ORPHAN_FILE_GRACE_MS, OrphanFileSweep, STORAGE_OWNER_KEY, sweepOrphanFiles } from '../src/modules/vault/orphan-files.js';
import { LocalBlobStorage, uploadKey, type BlobStorage, type StoredBlob } from '../src/providers/storage/index.js';
import { newId } from '../src/shared/ids.js';
import { bearer, login, makeUser, makeWorld, startTestApp, testConfig, type TestApp } from './support/app.js';
import { cliEnv, runCliCaptured } from './support/cli.js';
import { waitFor } from './support/realtime.js';
import { preparedDataDir } from './support/server-process.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * Stored file bytes no upload row references (a deletion whose removal of the bytes failed, or whose process
 * died after its commit; an upload whose row was never inserted) are removed by a sweep once they are older
 * than its grace period (an hour): the sweep of each node, and `npm run cli -- sweep-files`. Files are aged
 * by setting their mtime; the grace period itself is the real one.
 */

/** Local storage whose removals fail while `refuse` is set: a deletion's bytes are then left behind, as when its process dies. */
class RefusingStorage extends LocalBlobStorage {
  refuse = false;
  override async delete(key: string): Promise<void> {
    if (this.refuse) throw new Error('storage unavailable');
    await super.delete(key);
  }
}

const TWO_HOURS_AGO = () => new Date(Date.now() - 2 * 60 * 60 * 1000);
const pathIn = (root: string, key: string) => join(root, ...key.split('/'));

/** Makes the stored object look last written two hours ago (past the grace period). */
function age(root: string, key: string): void {
  const when = TWO_HOURS_AGO();
  utimesSync(pathIn(root, key), when, when);
}

/** Writes a file under the storage root as some other process would (a put's temporary file, a stranger's file). */
function writeRaw(root: string, relative: string, content: string): string {
  const path = join(root, ...relative.split('/'));
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, content);
  return path;
}

async function pagesOf(storage: BlobStorage, options?: { pageSize?: number }): Promise<StoredBlob[][]> {
  const pages: StoredBlob[][] = [];
  for await (const page of storage.list(options)) pages.push(page);
  return pages;
}

async function storageKeyOf(t: { database: { db: TestApp['database']['db'] } }, uploadId: string): Promise<string> {
  const [row] = await rowsOf<{ storage_key: string }>(t.database.db, sql`select storage_key from uploads where id = ${uploadId}`);
  assert.ok(row, `upload ${uploadId} has a row`);
  return row.storage_key;
}

describe('the sweep of stored files no upload references', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let storage: RefusingStorage;
  let root: string;
  let token = '';
  let rootToken = '';
  /** A file in use, uploaded through the API: its bytes must outlive every sweep. */
  const kept = { id: '', key: '', content: 'The albatross glides for hours without a wingbeat over the southern ocean.' };

  before(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'twin-orphans-'));
    storage = new RefusingStorage(join(dataDir, 'files'));
    root = storage.root;
    // FILE_SWEEP_INTERVAL_HOURS=0: no scheduled pass; each test runs the node's sweep when it means to
    t = await startTestApp({ dataDir, env: { FILE_SWEEP_INTERVAL_HOURS: '0', LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' }, build: { providers: { storage } } });
    w = await makeWorld(t.database);
    token = (await login(t.app, w.userA1.email)).accessToken;
    rootToken = (await login(t.app, w.superadmin.email)).accessToken;
    const up = await uploadOk(t.app, token, { name: 'albatross.txt', content: kept.content, type: 'text/plain' }, { scope: 'personal' });
    await waitForIngestion(t.app, token, up._id);
    kept.id = up._id;
    kept.key = await storageKeyOf(t, up._id);
  });
  after(async () => {
    await t.close();
    rmSync(t.dataDir, { recursive: true, force: true });
  });

  test('removes the old bytes of deleted files and of no row, and old unfinished puts; keeps files in use, young files and what is not a key', async () => {
    // a DELETE of a file and of a user whose removal of the bytes fails: their bytes stay behind
    const gone = await uploadOk(t.app, token, { name: 'gone.txt', content: 'The heron stands still in the reeds.', type: 'text/plain' }, { scope: 'personal' });
    await waitForIngestion(t.app, token, gone._id);
    const goneKey = await storageKeyOf(t, gone._id);
    const leaver = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const leaverToken = (await login(t.app, leaver.email)).accessToken;
    const leaverFile = await uploadOk(t.app, leaverToken, { name: 'leaver.txt', content: 'Notes of a user who leaves.', type: 'text/plain' }, { scope: 'personal' });
    await waitForIngestion(t.app, leaverToken, leaverFile._id);
    const leaverKey = await storageKeyOf(t, leaverFile._id);
    storage.refuse = true;
    assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/user/files/${gone._id}`, headers: bearer(token) })).statusCode, 200);
    assert.equal((await t.app.inject({ method: 'DELETE', url: `/api/admin/user/${leaver.id}`, headers: bearer(rootToken) })).statusCode, 200);
    storage.refuse = false;
    assert.equal(existsSync(pathIn(root, goneKey)), true, 'the deleted file keeps its bytes while the storage refuses');
    assert.equal(existsSync(pathIn(root, leaverKey)), true, "the deleted user's file keeps its bytes while the storage refuses");

    // bytes stored for an upload whose row never came (old), and for one whose row is still to come (young)
    const lostKey = uploadKey(newId());
    await storage.put(lostKey, Buffer.from('bytes of an upload that was never recorded'));
    const youngKey = uploadKey(newId());
    await storage.put(youngKey, Buffer.from('an upload in flight: its row comes next'));
    // puts' temporary files: one abandoned two hours ago, one being written
    const oldPartial = `${uploadKey(newId())}.0123456789ab.tmp`;
    writeRaw(root, oldPartial, 'half an upload');
    const youngPartial = `${uploadKey(newId())}.ba9876543210.tmp`;
    writeRaw(root, youngPartial, 'an upload being written');
    // files under the root that are no key of the storage: never touched
    const strangers = [writeRaw(root, 'lost+found/0001', 'fsck'), writeRaw(root, 'uploads/notes of the operator.txt', 'keep me')];
    for (const key of [kept.key, goneKey, leaverKey, lostKey, oldPartial]) age(root, key);
    for (const path of strangers) utimesSync(path, TWO_HOURS_AGO(), TWO_HOURS_AGO());

    const result = await t.app.fileSweep.run();
    const removedBytes = ['The heron stands still in the reeds.', 'Notes of a user who leaves.', 'bytes of an upload that was never recorded', 'half an upload'].reduce((n, s) => n + Buffer.byteLength(s), 0);
    assert.deepEqual(result, { listed: 7, orphans: 4, orphanBytes: removedBytes, removed: 4, removedBytes, failed: 0 });
    for (const key of [goneKey, leaverKey, lostKey, oldPartial]) assert.equal(existsSync(pathIn(root, key)), false, `${key} is still stored`);
    for (const key of [kept.key, youngKey, youngPartial]) assert.equal(existsSync(pathIn(root, key)), true, `${key} was removed`);
    for (const path of strangers) assert.equal(existsSync(path), true, `${path} was removed`);

    const download = await t.app.inject({ method: 'GET', url: `/api/user/files/${kept.id}/download`, headers: bearer(token) });
    assert.equal(download.statusCode, 200, download.body);
    assert.equal(download.body, kept.content);
    const metrics = await t.app.inject({ method: 'GET', url: '/metrics' });
    assert.match(metrics.body, /^vault_orphan_files_removed_total 4$/m);
    assert.match(metrics.body, new RegExp(`^vault_orphan_file_bytes_removed_total ${removedBytes}$`, 'm'));

    // nothing left to remove: a second pass removes nothing
    assert.deepEqual(await t.app.fileSweep.run(), { listed: 3, orphans: 0, orphanBytes: 0, removed: 0, removedBytes: 0, failed: 0 });
  });

  test('a removal that fails is counted and tried again by the next pass', async () => {
    const key = uploadKey(newId());
    await storage.put(key, Buffer.from('stuck'));
    age(root, key);
    storage.refuse = true;
    const refused = await t.app.fileSweep.run();
    storage.refuse = false;
    assert.equal(refused?.failed, 1);
    assert.equal(refused?.removed, 0);
    assert.equal(existsSync(pathIn(root, key)), true);
    const next = await t.app.fileSweep.run();
    assert.equal(next?.removed, 1);
    assert.equal(existsSync(pathIn(root, key)), false);
  });

  test('two nodes sweeping at once: an object the other node removed first is no failure', async () => {
    const keys = Array.from({ length: 7 }, () => uploadKey(newId()));
    for (const key of keys) {
      await storage.put(key, Buffer.from(`orphan ${key}`));
      age(root, key);
    }
    // node B lists them, then node A removes them all, then node B removes what it listed
    const nodeA = new LocalBlobStorage(root);
    const nodeB: BlobStorage = {
      put: (key, source) => nodeA.put(key, source),
      putIfAbsent: (key, bytes) => nodeA.putIfAbsent(key, bytes),
      get: (key) => nodeA.get(key),
      getBuffer: (key) => nodeA.getBuffer(key),
      delete: (key) => nodeA.delete(key),
      async *list(options) {
        const pages = await pagesOf(nodeA, options);
        assert.equal((await sweepOrphanFiles(t.database.db, nodeA)).removed, keys.length);
        yield* pages;
      },
    };
    const b = await sweepOrphanFiles(t.database.db, nodeB, { pageSize: 3 });
    assert.deepEqual([b.orphans, b.removed, b.failed], [keys.length, keys.length, 0]);
    for (const key of keys) assert.equal(existsSync(pathIn(root, key)), false, `${key} is still stored`);
    assert.equal(existsSync(pathIn(root, kept.key)), true);
  });

  test('the node sweeps on its own once it has started, without being asked', async () => {
    const key = uploadKey(newId());
    await storage.put(key, Buffer.from('left behind by a crash'));
    age(root, key);
    const sweep = new OrphanFileSweep({ db: t.database.db, storage, log: t.app.log }, { intervalMs: 60 * 60 * 1000, firstDelayMs: 0 });
    try {
      sweep.start();
      await waitFor(() => sweep.passes > 0, 'the first scheduled pass');
    } finally {
      await sweep.stop();
    }
    assert.equal(existsSync(pathIn(root, key)), false);
    assert.equal(existsSync(pathIn(root, kept.key)), true);
  });

  test('the grace period is an hour: a file just younger than it stays', async () => {
    const key = uploadKey(newId());
    await storage.put(key, Buffer.from('almost an hour old'));
    const when = new Date(Date.now() - ORPHAN_FILE_GRACE_MS + 5 * 60 * 1000);
    utimesSync(pathIn(root, key), when, when);
    assert.equal((await t.app.fileSweep.run())?.orphans, 0);
    assert.equal(existsSync(pathIn(root, key)), true);
    // the same file with the grace period passed
    assert.equal((await sweepOrphanFiles(t.database.db, storage, { now: () => Date.now() + 10 * 60 * 1000 })).removed, 1);
    assert.equal(existsSync(pathIn(root, key)), false);
  });

  test('the old bytes of an upload in any status but deleted are kept: processing (re-ingested or queued), error, inactive, selected', async () => {
    const statuses = ['processing', 'error', 'inactive', 'selected'] as const;
    const files: Array<{ status: (typeof statuses)[number]; id: string; key: string }> = [];
    for (const status of statuses) {
      const up = await uploadOk(t.app, token, { name: `${status}.txt`, content: `A file left in status ${status}.`, type: 'text/plain' }, { scope: 'personal' });
      await waitForIngestion(t.app, token, up._id);
      // as ingestion, a failed ingestion or a PATCH leaves it: the row says the status, its bytes are two hours old
      await t.database.db.execute(sql`update uploads set status = ${status} where id = ${up._id}`);
      const key = await storageKeyOf(t, up._id);
      age(root, key);
      files.push({ status, id: up._id, key });
    }
    const result = await t.app.fileSweep.run();
    assert.equal(result?.refused, undefined);
    assert.equal(result?.orphans, 0, `removed: ${JSON.stringify(result)}`);
    for (const { status, key } of files) assert.equal(existsSync(pathIn(root, key)), true, `the bytes of an upload in status ${status} were removed`);
    // the same file once deleted goes
    const [first] = files;
    await t.database.db.execute(sql`update uploads set status = 'deleted' where id = ${first!.id}`);
    assert.equal((await t.app.fileSweep.run())?.removed, 1);
    assert.equal(existsSync(pathIn(root, first!.key)), false);
  });
});

describe('a file storage is swept by the database it belongs to alone', () => {
  test('the first pass marks the storage with its database; an empty database claims no storage holding files; another database removes nothing from a marked one', async () => {
    const storage = new LocalBlobStorage(join(mkdtempSync(join(tmpdir(), 'twin-owned-files-')), 'files'));
    const root = storage.root;
    const env = { FILE_SWEEP_INTERVAL_HOURS: '0', LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' };
    // two databases (two data directories) whose nodes are given one file storage
    const first = await startTestApp({ env, build: { providers: { storage } } });
    const second = await startTestApp({ env, build: { providers: { storage } } });
    const ownerOf = async (t: TestApp) =>
      (await rowsOf<{ id: string }>(t.database.db, sql`select value->>'id' as id from system_state where key = 'file_storage_owner'`))[0]?.id;
    const uploadIn = async (t: TestApp, content: string) => {
      const w = await makeWorld(t.database);
      const token = (await login(t.app, w.userA1.email)).accessToken;
      const up = await uploadOk(t.app, token, { name: 'owned.txt', content, type: 'text/plain' }, { scope: 'personal' });
      await waitForIngestion(t.app, token, up._id);
      return storageKeyOf(t, up._id);
    };
    try {
      const orphan = uploadKey(newId());
      await storage.put(orphan, Buffer.from('bytes no row references'));
      age(root, orphan);

      // the second database has no upload at all while the storage holds files: it claims nothing and removes nothing
      const empty = await second.app.fileSweep.run();
      assert.match(empty?.refused ?? '', /^this database has no upload at all while the file storage holds files/);
      assert.deepEqual([empty?.listed, empty?.removed], [0, 0]);
      assert.equal(existsSync(pathIn(root, orphan)), true);
      assert.equal(existsSync(pathIn(root, STORAGE_OWNER_KEY)), false, 'a refused pass marks nothing');

      // the first database, with an upload, claims the storage and sweeps it; its mark is neither listed nor removed
      const firstKey = await uploadIn(first, 'The first database keeps this file.');
      age(root, firstKey);
      const dry = await sweepOrphanFiles(first.database.db, storage, { dryRun: true });
      assert.deepEqual([dry.refused, dry.orphans, dry.removed], [undefined, 1, 0]);
      assert.equal(existsSync(pathIn(root, STORAGE_OWNER_KEY)), false, 'a dry run claims nothing');
      const swept = await first.app.fileSweep.run();
      assert.deepEqual([swept?.refused, swept?.listed, swept?.removed], [undefined, 2, 1]);
      assert.equal(existsSync(pathIn(root, orphan)), false);
      const owner = await ownerOf(first);
      assert.ok(owner, 'the first database has its id');
      assert.deepEqual(JSON.parse(readFileSync(pathIn(root, STORAGE_OWNER_KEY), 'utf8')), { database: owner });
      age(root, STORAGE_OWNER_KEY);
      assert.deepEqual([(await first.app.fileSweep.run())?.listed, existsSync(pathIn(root, STORAGE_OWNER_KEY))], [1, true]);

      // the second database, now with an upload of its own, sweeps nothing of the storage the first one marked
      const secondKey = await uploadIn(second, 'The second database keeps this file.');
      const another = uploadKey(newId());
      await storage.put(another, Buffer.from('another orphan'));
      for (const key of [secondKey, another]) age(root, key);
      for (const dryRun of [true, false]) {
        const refused = await sweepOrphanFiles(second.database.db, storage, { dryRun });
        assert.match(refused.refused ?? '', new RegExp(`^the file storage belongs to another database \\(its storage-owner names ${owner}; this database is ${await ownerOf(second)}\\)`));
        assert.deepEqual([refused.listed, refused.orphans, refused.removed], [0, 0, 0]);
      }
      for (const key of [firstKey, secondKey, another]) assert.equal(existsSync(pathIn(root, key)), true, `${key} was removed`);
      // an unreadable mark is another database's too
      writeFileSync(pathIn(root, STORAGE_OWNER_KEY), 'not json');
      assert.match((await first.app.fileSweep.run())?.refused ?? '', /^the file storage belongs to another database \(its storage-owner names \(unreadable: "not json"\)/);
      assert.equal(existsSync(pathIn(root, another)), true);
    } finally {
      await first.close();
      await second.close();
      rmSync(dirname(root), { recursive: true, force: true });
    }
  });

  test('two databases claiming one unmarked storage at the same moment: one claims it, the other sweeps nothing', async () => {
    // Both first passes read the storage's mark before either writes one (the reads meet here), as two nodes of two
    // databases starting together would: each sees an unmarked storage and claims it.
    class MeetingStorage extends LocalBlobStorage {
      private waiting: Array<() => void> = [];
      override async getBuffer(key: string): Promise<Buffer> {
        if (key === STORAGE_OWNER_KEY && this.waiting.length < 2) {
          await new Promise<void>((resolve) => {
            this.waiting.push(resolve);
            if (this.waiting.length === 2) for (const go of this.waiting) go();
          });
        }
        return super.getBuffer(key);
      }
    }
    const storage = new MeetingStorage(join(mkdtempSync(join(tmpdir(), 'twin-claimed-files-')), 'files'));
    const env = { FILE_SWEEP_INTERVAL_HOURS: '0', LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' };
    const apps = [await startTestApp({ env, build: { providers: { storage } } }), await startTestApp({ env, build: { providers: { storage } } })];
    try {
      for (const t of apps) {
        const w = await makeWorld(t.database);
        const token = (await login(t.app, w.userA1.email)).accessToken;
        await waitForIngestion(t.app, token, (await uploadOk(t.app, token, { name: 'mine.txt', content: 'A file of this database.', type: 'text/plain' }, { scope: 'personal' }))._id);
      }
      const passes = await Promise.all(apps.map((t) => sweepOrphanFiles(t.database.db, storage)));
      const ids = await Promise.all(
        apps.map(async (t) => (await rowsOf<{ id: string }>(t.database.db, sql`select value->>'id' as id from system_state where key = 'file_storage_owner'`))[0]?.id),
      );
      assert.ok(ids[0] && ids[1] && ids[0] !== ids[1], 'two databases, two ids');
      const claimed = passes.flatMap((p, i) => (p.refused === undefined ? [i] : []));
      assert.equal(claimed.length, 1, `exactly one database claims the storage: ${JSON.stringify(passes.map((p) => p.refused ?? 'claimed'))}`);
      const winner = claimed[0]!;
      const loser = 1 - winner;
      const mark = JSON.parse(readFileSync(pathIn(storage.root, STORAGE_OWNER_KEY), 'utf8')) as { database: string };
      assert.deepEqual(mark, { database: ids[winner] });
      assert.match(passes[loser]!.refused ?? '', new RegExp(`^the file storage belongs to another database \\(its storage-owner names ${ids[winner]}; this database is ${ids[loser]}\\)`));
      assert.deepEqual([passes[loser]!.listed, passes[loser]!.removed], [0, 0]);
      assert.equal(passes[winner]!.listed, 2, "the winner lists both databases' files (young: it removes neither)");
      // the next passes keep to it
      assert.equal((await sweepOrphanFiles(apps[winner]!.database.db, storage)).refused, undefined);
      assert.match((await sweepOrphanFiles(apps[loser]!.database.db, storage)).refused ?? '', /^the file storage belongs to another database/);
    } finally {
      for (const t of apps) await t.close();
      rmSync(dirname(storage.root), { recursive: true, force: true });
    }
  });
});

describe('LocalBlobStorage.list and putIfAbsent', () => {
  let root: string;
  before(() => {
    root = mkdtempSync(join(tmpdir(), 'twin-blob-list-'));
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  test('lists every key once, in pages of at most pageSize, with size, time and partial; skips what is not a key; nothing for a missing root', async () => {
    const storage = new LocalBlobStorage(join(root, 'files'));
    assert.deepEqual(await pagesOf(storage), []);
    const keys = ['uploads/aa/bb/one', 'uploads/aa/bb/two', 'uploads/aa/cc/three', 'uploads/dd/ee/four', 'other/five'];
    for (const key of keys) await storage.put(key, Buffer.from(key));
    writeRaw(storage.root, 'uploads/aa/bb/six.00aa11bb22cc.tmp', 'partial');
    writeRaw(storage.root, 'lost+found/seven', 'not a key');
    writeRaw(storage.root, 'uploads/aa/bb/with space', 'not a key');
    const pages = await pagesOf(storage, { pageSize: 2 });
    for (const page of pages) assert.ok(page.length >= 1 && page.length <= 2, `a page of ${page.length}`);
    const listed = pages.flat().sort((a, b) => a.key.localeCompare(b.key));
    assert.deepEqual(
      listed.map((b) => [b.key, b.size, b.partial]),
      [...keys.map((k) => [k, Buffer.byteLength(k), false] as const), ['uploads/aa/bb/six.00aa11bb22cc.tmp', 7, true] as const].sort((a, b) => a[0].localeCompare(b[0])),
    );
    // the time is the file's mtime
    const when = new Date('2020-01-02T03:04:05.000Z');
    utimesSync(join(storage.root, 'other', 'five'), when, when);
    const pagesOfDefault = await pagesOf(storage);
    assert.equal(pagesOfDefault.length, 1, 'the default page holds all six');
    const whole = pagesOfDefault[0]!;
    assert.equal(whole.length, 6);
    assert.equal(whole.find((b) => b.key === 'other/five')?.modifiedAt.toISOString(), when.toISOString());
  });

  test('putIfAbsent stores under a free key only: of 20 racing calls one stores, what it stored stays, no temporary file is left', async () => {
    const storage = new LocalBlobStorage(join(root, 'exclusive'));
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => storage.putIfAbsent('marks/one', Buffer.from(`writer ${i}`))));
    assert.equal(results.filter(Boolean).length, 1);
    const winner = results.indexOf(true);
    assert.equal((await storage.getBuffer('marks/one')).toString(), `writer ${winner}`);
    assert.equal(await storage.putIfAbsent('marks/one', Buffer.from('later')), false);
    assert.equal((await storage.getBuffer('marks/one')).toString(), `writer ${winner}`);
    assert.deepEqual((await pagesOf(storage)).flat().map((b) => [b.key, b.partial]), [['marks/one', false]]);
    assert.equal(await storage.putIfAbsent('marks/two', Buffer.from('free')), true);
    assert.equal((await storage.getBuffer('marks/two')).toString(), 'free');
  });
});

describe('npm run cli -- sweep-files', () => {
  let dataDir: string;
  const env = () => cliEnv(dataDir);
  const run = (...argv: string[]) => runCliCaptured(env(), argv);
  const root = () => join(dataDir, 'files');
  /** The server on the data directory (the embedded database is one process's at a time: closed before the CLI runs). */
  const withApp = async <T>(fn: (app: App) => Promise<T>): Promise<T> => {
    const app = await buildApp({ config: testConfig(dataDir, { ...env(), FILE_SWEEP_INTERVAL_HOURS: '0' }) });
    try {
      await app.ready();
      return await fn(app);
    } finally {
      await app.close();
    }
  };
  const content = 'Kepler found that the planets sweep equal areas in equal times.';
  let upload = { id: '', key: '', email: '' };

  before(async () => {
    dataDir = await preparedDataDir('twin-cli-sweep-');
  });
  after(() => rmSync(dataDir, { recursive: true, force: true }));

  test('--dry-run reports the old orphan and removes nothing; the run removes it alone; the uploaded file still downloads', async () => {
    upload = await withApp(async (app) => {
      const w = await makeWorld(app.ctx.database);
      const token = (await login(app, w.userA1.email)).accessToken;
      const up = await uploadOk(app, token, { name: 'kepler.txt', content, type: 'text/plain' }, { scope: 'personal' });
      await waitForIngestion(app, token, up._id);
      return { id: up._id, key: await storageKeyOf({ database: app.ctx.database }, up._id), email: w.userA1.email };
    });
    const orphan = uploadKey(newId());
    await new LocalBlobStorage(root()).put(orphan, Buffer.from('no row for these bytes'));
    const young = uploadKey(newId());
    await new LocalBlobStorage(root()).put(young, Buffer.from('young'));
    age(root(), orphan);
    age(root(), upload.key);

    const dry = await run('sweep-files', '--dry-run');
    assert.equal(dry.code, 0, dry.output);
    assert.match(dry.output, new RegExp(`^  would remove ${orphan} \\(22 bytes, last written \\S+\\)$`, 'm'));
    assert.match(dry.output, /^dry run: 1 file \(22 bytes\) of 3 stored would be removed; nothing was removed$/m);
    assert.doesNotMatch(dry.output, new RegExp(`${upload.key}|${young}`));
    for (const key of [orphan, young, upload.key]) assert.equal(existsSync(pathIn(root(), key)), true, `the dry run removed ${key}`);

    const real = await run('sweep-files');
    assert.equal(real.code, 0, real.output);
    assert.match(real.output, new RegExp(`^  removed ${orphan} \\(22 bytes, last written \\S+\\)$`, 'm'));
    assert.match(real.output, /^removed 1 file \(22 bytes\) of 3 stored$/m);
    assert.equal(existsSync(pathIn(root(), orphan)), false);
    assert.equal(existsSync(pathIn(root(), young)), true);
    assert.equal(readFileSync(pathIn(root(), upload.key), 'utf8'), content);

    await withApp(async (app) => {
      const token = (await login(app, upload.email)).accessToken;
      const res = await app.inject({ method: 'GET', url: `/api/user/files/${upload.id}/download`, headers: bearer(token) });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.body, content);
    });
  });

  test('a storage marked by another database: the run removes nothing and exits 1', async () => {
    const orphan = uploadKey(newId());
    await new LocalBlobStorage(root()).put(orphan, Buffer.from('an orphan'));
    age(root(), orphan);
    writeFileSync(pathIn(root(), STORAGE_OWNER_KEY), JSON.stringify({ database: 'another-database' }));
    for (const argv of [['sweep-files', '--dry-run'], ['sweep-files']]) {
      const r = await run(...argv);
      assert.equal(r.code, 1, r.output);
      assert.match(r.output, /^refused: the file storage belongs to another database \(its storage-owner names another-database; /m);
    }
    assert.equal(existsSync(pathIn(root(), orphan)), true);
  });

  test('--dry-run belongs to sweep-files alone', async () => {
    await assert.rejects(run('migrate', '--dry-run'), /--dry-run is an option of sweep-files only/);
  });
});

test('FILE_SWEEP_INTERVAL_HOURS is 0 to 168', () => {
  assert.throws(() => testConfig(tmpdir(), { FILE_SWEEP_INTERVAL_HOURS: '169' }), /FILE_SWEEP_INTERVAL_HOURS must be an integer from 0 to 168 \(got "169"\)/);
  assert.equal(loadConfig({ NODE_ENV: 'test', DATA_DIR: tmpdir() }).fileSweepIntervalHours, 6);
});
