import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { listOutboxMessages } from '../src/providers/mail/outbox.js';
import { enrolMfa, login, makeAccount, makeInstitution, makeUser, PASSWORD, startTestApp, type TestApp } from './support/app.js';

/** A trusted-device cookie that is not of the issued shape is no cookie: never a 400, never a code used up for nothing. */
describe('mfa: malformed trusted-device cookies', () => {
  let t: TestApp;
  let accountId: string;
  let institutionId: string;
  before(async () => {
    t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_EMAIL: '1000', LOGIN_RATE_LIMIT_PER_IP: '10000', MFA_CHALLENGES_PER_15_MIN: '100' } });
    accountId = (await makeAccount(t.database)).id;
    institutionId = (await makeInstitution(t.database, accountId)).id;
  });
  after(() => t.close());

  const lastCode = async (email: string) => {
    const [m] = await listOutboxMessages(t.database.db, { to: email, limit: 1 });
    return m!.text.match(/(?<!\d)\d{6}(?!\d)/)![0];
  };

  async function enrolledUser() {
    const user = await makeUser(t.database, { accountId, memberships: { [institutionId]: 'user' } });
    const { accessToken } = await login(t.app, user.email);
    await enrolMfa(t.app, accessToken, () => lastCode(user.email));
    return { user, accessToken };
  }

  const garbage = ['tdid=abc%00def.secret', `tdid=${'0'.repeat(8)}-0000-0000-0000-${'0'.repeat(12)}%00.${'a'.repeat(43)}`, 'tdid=a.b.c', 'tdid=%ZZ.%00', `tdid=${'é'.repeat(60)}.x`];

  test('a garbage trusted-device cookie (a NUL, another shape) is ignored at login: the MFA user gets the code step, not a 400', async () => {
    const { user } = await enrolledUser();
    for (const cookie of garbage) {
      const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD }, headers: { cookie } });
      assert.equal(res.statusCode, 200, `${cookie}: ${res.body}`);
      assert.equal(res.json().mfaRequired, true, cookie);
    }
  });

  test('the same garbage cookie at the code step still lets the correct code in', async () => {
    const { user } = await enrolledUser();
    const first = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD } });
    assert.equal(first.json().mfaRequired, true, first.body);
    const done = await t.app.inject({
      method: 'POST',
      url: '/api/auth/login/mfa',
      payload: { challengeId: first.json().challengeId, code: await lastCode(user.email), rememberDevice: true },
      headers: { cookie: 'tdid=abc%00def.secret' },
    });
    assert.equal(done.statusCode, 200, done.body);
    assert.ok(done.json().accessToken);
    // the browser is trusted from now on, by a cookie of its own
    const issued = /tdid=([^;]+)/.exec(String(done.headers['set-cookie']))?.[1];
    assert.ok(issued, String(done.headers['set-cookie']));
    const again = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD }, headers: { cookie: `tdid=${issued}` } });
    assert.equal(again.statusCode, 200, again.body);
    assert.equal(again.json().mfaRequired, undefined, again.body);
    assert.ok(again.json().accessToken);
  });
});
