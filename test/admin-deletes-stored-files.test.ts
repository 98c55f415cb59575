import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { bearer, login, makeAccount, makeInstitution, makeUser, makeWorld, startTestApp, type TestApp } from './support/app.js';
import { uploadOk, waitForIngestion } from './support/uploads.js';

/**
 * Deleting a user, an institution or an account removes its upload rows by ON DELETE CASCADE; the stored
 * bytes of those uploads (DATA_DIR/files) go too, after the commit, as with DELETE /api/user/files/{id}:
 * nothing references them any more, and a deleted user's documents must not outlive them. What is not
 * deleted keeps its bytes.
 */
describe('admin deletions remove the stored bytes of the uploads that go with them', () => {
  let t: TestApp;
  let w: Awaited<ReturnType<typeof makeWorld>>;
  let root = '';

  const del = (url: string) => t.app.inject({ method: 'DELETE', url, headers: bearer(root) });

  function storedFiles(): string[] {
    const walk = (dir: string): string[] =>
      existsSync(dir) ? readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)])) : [];
    return walk(join(t.dataDir, 'files'));
  }

  /** Uploads a small text file as the user and returns where its bytes are stored. */
  async function storedUpload(email: string, fields: Record<string, string>): Promise<string> {
    const token = (await login(t.app, email)).accessToken;
    const up = await uploadOk(t.app, token, { name: 'notes.txt', content: 'Private notes of a user about the syllabus and grading.', type: 'text/plain' }, fields);
    await waitForIngestion(t.app, token, up._id);
    const path = storedFiles().find((f) => f.endsWith(up._id));
    assert.ok(path, 'the upload is stored');
    return path;
  }

  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000' } });
    w = await makeWorld(t.database);
    root = (await login(t.app, w.superadmin.email)).accessToken;
  });
  after(() => t.close());

  test("DELETE /api/admin/user/{id} removes the stored bytes of every file the user uploaded (personal and instance scope), not of another user's", async () => {
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [w.a1.id]: 'user' } });
    const personal = await storedUpload(user.email, { scope: 'personal' });
    // the route says every vault file of the user goes, whatever its scope: its row goes by cascade (owner)
    const instance = await storedUpload(user.email, { scope: 'instance', institution: w.a1.id });
    const others = await storedUpload(w.userA1.email, { scope: 'instance', institution: w.a1.id });
    const res = await del(`/api/admin/user/${user.id}`);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(existsSync(personal), false, `the deleted user's personal file is still stored at ${personal}`);
    assert.equal(existsSync(instance), false, `the deleted user's instance file is still stored at ${instance}`);
    assert.equal(existsSync(others), true, "another user's file of the same institution is kept");
  });

  test("DELETE /api/admin/institution/{id} removes the stored bytes of the institution's files, not of its members' personal files", async () => {
    const inst = await makeInstitution(t.database, w.accountA.id, { name: 'Doomed', ainame: 'Doomed' });
    const user = await makeUser(t.database, { accountId: w.accountA.id, memberships: { [inst.id]: 'user' } });
    const instance = await storedUpload(user.email, { scope: 'instance', institution: inst.id });
    const personal = await storedUpload(user.email, { scope: 'personal' });
    const res = await del(`/api/admin/institution/${inst.id}`);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(existsSync(instance), false, `the deleted institution's file is still stored at ${instance}`);
    assert.equal(existsSync(personal), true, "a member's personal file stays with the member");
  });

  test("DELETE /api/admin/account/{id} removes the stored bytes of the account's files and of those its users uploaded in another account", async () => {
    const account = await makeAccount(t.database, { name: 'Doomed account' });
    const inst = await makeInstitution(t.database, account.id, { name: 'Doomed institution', ainame: 'Doomed' });
    // a user of the account, also enrolled (by a superadmin) in A1 of account A
    const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user', [w.a1.id]: 'user' } });
    const personal = await storedUpload(user.email, { scope: 'personal' });
    const instance = await storedUpload(user.email, { scope: 'instance', institution: inst.id });
    const abroad = await storedUpload(user.email, { scope: 'instance', institution: w.a1.id });
    const kept = await storedUpload(w.userA1.email, { scope: 'personal' });
    const res = await del(`/api/admin/account/${account.id}`);
    assert.equal(res.statusCode, 200, res.body);
    for (const path of [personal, instance, abroad]) assert.equal(existsSync(path), false, `a file of the deleted account is still stored at ${path}`);
    assert.equal(existsSync(kept), true, "another account's file is kept");
  });
});
