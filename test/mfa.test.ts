import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { eq } from 'drizzle-orm';
import type { InjectOptions } from 'fastify';
import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { mfaChallenges, trustedDevices } from '../src/db/schema.js';
import { listOutboxMessages } from '../src/providers/mail/outbox.js';
import { updateUser } from '../src/modules/identity/identity.repository.js';
import { ManualClock } from '../src/shared/clock.js';
import { bearer, login, makeAccount, makeInstitution, makeUser, PASSWORD, startTestApp, type TestApp } from './support/app.js';

// ───────────── a real SMTP server on 127.0.0.1:0 ─────────────

interface MailSink {
  port: number;
  url: string;
  received: ParsedMail[];
  /** The latest message to this address (fails when there is none). */
  last(to: string): ParsedMail;
  countTo(to: string): number;
  close(): Promise<void>;
}

async function startSmtp(): Promise<MailSink> {
  const received: ParsedMail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disableReverseLookup: true,
    logger: false,
    onData(stream, _session, callback) {
      simpleParser(stream).then(
        (mail) => {
          received.push(mail);
          callback();
        },
        (err: Error) => callback(err),
      );
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.server.address() as AddressInfo).port;
  const toOf = (m: ParsedMail) => (Array.isArray(m.to) ? m.to : m.to ? [m.to] : []).flatMap((a) => a.value.map((v) => v.address?.toLowerCase()));
  return {
    port,
    // smtp-server offers STARTTLS with a self-signed certificate; a plain local relay is used as is.
    url: `smtp://127.0.0.1:${port}/?ignoreTLS=true`,
    received,
    last(to) {
      const mail = [...received].reverse().find((m) => toOf(m).includes(to.toLowerCase()));
      if (!mail) throw new Error(`no mail to ${to}`);
      return mail;
    },
    countTo: (to) => received.filter((m) => toOf(m).includes(to.toLowerCase())).length,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The code of a message: the only run of exactly six digits in its text. */
function codeOf(mail: ParsedMail): string {
  const found = (mail.text ?? '').match(/(?<!\d)\d{6}(?!\d)/g) ?? [];
  assert.equal(found.length, 1, `exactly one 6-digit code in the text: ${mail.text}`);
  return found[0]!;
}

const otherCode = (code: string, n = 1) => String((Number(code) + n) % 1_000_000).padStart(6, '0');

/** name=value of the trusted-device cookie from a response, and its raw Set-Cookie line. */
function deviceCookieOf(res: { headers: Record<string, unknown> }): { value: string; raw: string } | undefined {
  const header = res.headers['set-cookie'];
  const lines = Array.isArray(header) ? (header as string[]) : typeof header === 'string' ? [header] : [];
  const raw = lines.find((l) => l.startsWith('tdid='));
  if (!raw) return undefined;
  return { value: raw.slice('tdid='.length).split(';')[0]!, raw };
}

const T0 = new Date('2026-11-01T10:00:00Z');
const MIN = 60_000;
const DAY = 86_400_000;

describe('mfa: enrolment, login second factor, trusted devices (real SMTP)', () => {
  let t: TestApp;
  let smtp: MailSink;
  const clock = new ManualClock(T0);
  let accountId: string;
  let institutionId: string;

  before(async () => {
    smtp = await startSmtp();
    t = await startTestApp({
      clock,
      env: {
        SMTP_URL: smtp.url,
        MAIL_FROM: 'Twin Test <mfa@twin.test>',
        SERVICE_NAME: 'Twin Test Service',
        LOGIN_RATE_LIMIT_PER_EMAIL: '1000',
        LOGIN_RATE_LIMIT_PER_IP: '1000',
      },
    });
    const account = await makeAccount(t.database);
    accountId = account.id;
    institutionId = (await makeInstitution(t.database, account.id, { name: 'Acme Physics', ainame: 'Newton' })).id;
  });
  after(async () => {
    await t.close();
    await smtp.close();
  });

  const newUser = () => makeUser(t.database, { accountId, memberships: { [institutionId]: 'user' } });
  type User = Awaited<ReturnType<typeof newUser>>;

  const inject = (opts: InjectOptions) => t.app.inject(opts);
  const passwordLogin = (user: User, cookie?: string) =>
    inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD }, cookies: cookie ? { tdid: cookie } : {} });
  const loginMfa = (payload: Record<string, unknown>, cookie?: string) =>
    inject({ method: 'POST', url: '/api/auth/login/mfa', payload, cookies: cookie ? { tdid: cookie } : {} });
  const enroll = (token: string) => inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(token) });
  const verify = (token: string, payload: Record<string, unknown>) => inject({ method: 'POST', url: '/api/user/me/mfa-verify', headers: bearer(token), payload });
  const patchMe = (token: string, payload: Record<string, unknown>) => inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(token), payload });
  const devices = async (token: string) => {
    const res = await inject({ method: 'GET', url: '/api/user/me/trusted-devices', headers: bearer(token) });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().devices as Array<Record<string, string>>;
  };

  /** The whole enrolment over HTTP; returns a live access token and the trusted-device cookie. */
  async function enrolled(user: User): Promise<{ accessToken: string; cookie: string; deviceId: string }> {
    const { accessToken } = await login(t.app, user.email);
    assert.equal((await patchMe(accessToken, { mfaEnabled: true })).statusCode, 200);
    const started = await enroll(accessToken);
    assert.equal(started.statusCode, 200, started.body);
    const res = await verify(accessToken, { challengeId: started.json().challengeId, code: codeOf(smtp.last(user.email)) });
    assert.equal(res.statusCode, 200, res.body);
    const cookie = deviceCookieOf(res);
    assert.ok(cookie);
    return { accessToken, cookie: cookie.value, deviceId: res.json().device.id };
  }

  /** Password step of an MFA login without a trusted device: the challenge and its e-mailed code. */
  async function challenge(user: User, cookie?: string): Promise<{ challengeId: string; code: string }> {
    const res = await passwordLogin(user, cookie);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().mfaRequired, true, res.body);
    return { challengeId: res.json().challengeId, code: codeOf(smtp.last(user.email)) };
  }

  test('enrolment then login, codes read from mail received by a real SMTP server', async () => {
    const user = await newUser();
    const { accessToken } = await login(t.app, user.email);

    // Not pending yet: the enroll endpoint refuses clearly.
    const early = await enroll(accessToken);
    assert.equal(early.statusCode, 409);
    assert.equal(early.json().error.code, 'CONFLICT');
    assert.match(early.json().message, /mfaEnabled/);

    const pending = await patchMe(accessToken, { mfaEnabled: true });
    assert.equal(pending.statusCode, 200);
    assert.equal(pending.json().data.mfaEnabled, true);
    assert.equal(pending.json().data.mfaPending, true);
    // Pending MFA is not enforced at login.
    assert.ok((await passwordLogin(user)).json().accessToken);

    const before = smtp.countTo(user.email);
    const started = await enroll(accessToken);
    assert.equal(started.statusCode, 200, started.body);
    const body = started.json();
    assert.deepEqual(Object.keys(body).sort(), ['challengeId', 'maskedEmail', 'success']);
    assert.equal(body.success, true);
    assert.equal(body.maskedEmail, `u***@example.com`);
    assert.ok(user.email.startsWith('u'));

    assert.equal(smtp.countTo(user.email), before + 1);
    const mail = smtp.last(user.email);
    assert.equal(mail.from?.value[0]?.address, 'mfa@twin.test');
    assert.match(mail.subject ?? '', /Twin Test Service/);
    const code = codeOf(mail);
    assert.doesNotMatch(mail.subject ?? '', /\d{6}/, 'the subject (which is logged) never carries the code');
    assert.match(mail.text ?? '', /Twin Test Service/);
    assert.match(mail.text ?? '', /Acme Physics/);
    assert.match(mail.text ?? '', /Newton/);
    assert.match(mail.text ?? '', /expires in 5 minutes, at 10:05 UTC/);
    assert.ok(typeof mail.html === 'string' && mail.html.includes(code), 'the html carries the code as six consecutive digits');
    assert.match(mail.html as string, /Acme Physics/);

    // Stored hashed, never the code itself.
    const [row] = await t.database.db.select().from(mfaChallenges).where(eq(mfaChallenges.id, body.challengeId));
    assert.equal(row?.purpose, 'enroll');
    assert.notEqual(row?.codeHash, code);
    assert.ok(!row?.codeHash.includes(code));
    assert.equal(row?.expiresAt.toISOString(), new Date(T0.getTime() + 5 * MIN).toISOString());

    const verified = await verify(accessToken, { challengeId: body.challengeId, code });
    assert.equal(verified.statusCode, 200, verified.body);
    const v = verified.json();
    assert.equal(v.success, true);
    assert.equal(v.mfaEnabled, true);
    assert.deepEqual(Object.keys(v.device).sort(), ['createdAt', 'deviceId', 'expiresAt', 'id', 'lastUsedAt', 'sourceIp', 'ua']);
    assert.equal(v.device.sourceIp, '127.0.0.1');
    assert.equal(v.device.ua, 'lightMyRequest');
    assert.equal(v.device.createdAt, clock.now().toISOString());
    assert.equal(v.device.expiresAt, new Date(clock.now().getTime() + 7 * DAY).toISOString());
    const enrolCookie = deviceCookieOf(verified);
    assert.ok(enrolCookie, 'verification sets the trusted-device cookie');
    // Only a keyed hash of the cookie secret is stored.
    const [deviceRow] = await t.database.db.select().from(trustedDevices).where(eq(trustedDevices.id, v.device.id));
    const secret = enrolCookie.value.split('.')[1]!;
    assert.ok(secret.length >= 40);
    assert.ok(!deviceRow!.secretHash.includes(secret));

    const me = await inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) });
    assert.equal(me.json().data.mfaEnabled, true);
    assert.equal(me.json().data.mfaPending, false);
    assert.deepEqual(
      (await devices(accessToken)).map((d) => d.id),
      [v.device.id],
    );

    // A browser without the cookie: password, then the e-mailed code.
    const first = await passwordLogin(user);
    assert.equal(first.statusCode, 200);
    const f = first.json();
    assert.deepEqual(Object.keys(f).sort(), ['challengeId', 'maskedEmail', 'mfaRequired', 'success']);
    assert.equal(f.success, true);
    assert.equal(f.mfaRequired, true);
    assert.equal(f.maskedEmail, 'u***@example.com');
    const loginMail = smtp.last(user.email);
    assert.match(loginMail.subject ?? '', /sign-in code/);
    assert.match(loginMail.text ?? '', /finish signing in/);

    const done = await loginMfa({ challengeId: f.challengeId, code: codeOf(loginMail) });
    assert.equal(done.statusCode, 200, done.body);
    assert.ok(done.json().accessToken);
    assert.ok(done.json().refreshToken);
    assert.equal(done.json().user.email, user.email);
    assert.equal((await inject({ method: 'GET', url: '/api/user/me', headers: bearer(done.json().accessToken) })).statusCode, 200);
    const loginCookie = deviceCookieOf(done);
    assert.ok(loginCookie, 'rememberDevice defaults to true');

    // That browser now skips the code; lastUsedAt moves to now, and no mail is sent.
    clock.advance(3 * MIN);
    const mailsBefore = smtp.countTo(user.email);
    const skipped = await passwordLogin(user, loginCookie.value);
    assert.equal(skipped.statusCode, 200);
    assert.ok(skipped.json().accessToken, skipped.body);
    assert.equal(smtp.countTo(user.email), mailsBefore);
    const list = await devices(skipped.json().accessToken);
    assert.equal(list.length, 2);
    assert.equal(list[0]!.lastUsedAt, clock.now().toISOString(), 'the used device is first (lastUsedAt desc)');
    assert.notEqual(list[0]!.id, v.device.id);
    assert.equal(list[1]!.id, v.device.id);

    // rememberDevice false: tokens, but no cookie and no new device.
    const c = await challenge(user);
    const noRemember = await loginMfa({ ...c, rememberDevice: false });
    assert.equal(noRemember.statusCode, 200);
    assert.ok(noRemember.json().accessToken);
    assert.equal(deviceCookieOf(noRemember), undefined);
    assert.equal((await devices(noRemember.json().accessToken)).length, 2);
  });

  test('the trusted-device cookie is HttpOnly, SameSite=Lax, Path=/, 7 days, and not Secure by default in test mode', async () => {
    const user = await newUser();
    await enrolled(user);
    const c = await challenge(user);
    const res = await loginMfa(c);
    const cookie = deviceCookieOf(res);
    assert.ok(cookie);
    const attrs = cookie.raw.split(';').map((s) => s.trim().toLowerCase());
    assert.ok(attrs.includes('httponly'), cookie.raw);
    assert.ok(attrs.includes('samesite=lax'), cookie.raw);
    assert.ok(attrs.includes('path=/'), cookie.raw);
    assert.ok(attrs.includes('max-age=604800'), cookie.raw);
    assert.ok(!attrs.includes('secure'), cookie.raw);
    assert.match(cookie.value, /^[0-9a-f-]{36}\.[\w-]{40,}$/);
  });

  test('a code expires after 5 minutes (ManualClock)', async () => {
    const user = await newUser();
    await enrolled(user);

    const inTime = await challenge(user);
    clock.advance(5 * MIN - 1000);
    assert.equal((await loginMfa(inTime)).statusCode, 200, 'valid until the fifth minute');

    const late = await challenge(user);
    clock.advance(5 * MIN);
    const res = await loginMfa(late);
    assert.equal(res.statusCode, 401);
    assert.equal(res.json().error.code, 'UNAUTHENTICATED');
    assert.equal(res.json().error.details[0].reason, 'expired');
    assert.match(res.json().message, /expired/);
    assert.equal(res.json().accessToken, undefined);
  });

  test('five wrong codes close a challenge, even for the right code afterwards', async () => {
    const user = await newUser();
    await enrolled(user);
    const c = await challenge(user);
    for (let i = 1; i <= 5; i++) {
      const res = await loginMfa({ challengeId: c.challengeId, code: otherCode(c.code, i) });
      assert.equal(res.statusCode, 401);
      assert.equal(res.json().accessToken, undefined);
      const detail = res.json().error.details[0];
      assert.equal(detail.reason, 'wrong_code');
      assert.equal(detail.attemptsLeft, 5 - i);
      assert.equal(deviceCookieOf(res), undefined);
    }
    const [row] = await t.database.db.select().from(mfaChallenges).where(eq(mfaChallenges.id, c.challengeId));
    assert.equal(row?.attempts, 5);
    const right = await loginMfa(c);
    assert.equal(right.statusCode, 401);
    assert.equal(right.json().error.details[0].reason, 'too_many_attempts');
    assert.equal(right.json().accessToken, undefined);
    // The counter stops at 5.
    await loginMfa({ challengeId: c.challengeId, code: otherCode(c.code) });
    const [after] = await t.database.db.select().from(mfaChallenges).where(eq(mfaChallenges.id, c.challengeId));
    assert.equal(after?.attempts, 5);
  });

  test('the enrolment verification also counts wrong codes (400, not 401)', async () => {
    const user = await newUser();
    const { accessToken } = await login(t.app, user.email);
    await patchMe(accessToken, { mfaEnabled: true });
    const started = (await enroll(accessToken)).json();
    const code = codeOf(smtp.last(user.email));
    const wrong = await verify(accessToken, { challengeId: started.challengeId, code: otherCode(code) });
    assert.equal(wrong.statusCode, 400);
    assert.equal(wrong.json().error.code, 'VALIDATION_FAILED');
    assert.equal(wrong.json().error.details[0].field, 'code');
    assert.equal(wrong.json().error.details[0].attemptsLeft, 4);
    assert.equal(deviceCookieOf(wrong), undefined);
    const me = await inject({ method: 'GET', url: '/api/user/me', headers: bearer(accessToken) });
    assert.equal(me.json().data.mfaPending, true);
    assert.equal((await verify(accessToken, { challengeId: started.challengeId, code })).statusCode, 200);
  });

  test('a used code cannot be used again', async () => {
    const user = await newUser();
    await enrolled(user);
    const c = await challenge(user);
    assert.equal((await loginMfa(c)).statusCode, 200);
    const again = await loginMfa(c);
    assert.equal(again.statusCode, 401);
    assert.equal(again.json().error.details[0].reason, 'used');
    assert.equal(again.json().accessToken, undefined);
  });

  test('concurrent uses of one code: exactly one succeeds', async () => {
    const user = await newUser();
    await enrolled(user);
    const c = await challenge(user);
    const results = await Promise.all(Array.from({ length: 6 }, () => loginMfa(c)));
    assert.deepEqual(results.map((r) => r.statusCode).sort(), [200, 401, 401, 401, 401, 401]);
  });

  test('a challenge of another user is refused and stays usable by its owner', async () => {
    const alice = await newUser();
    const bob = await newUser();
    const a = await login(t.app, alice.email);
    const b = await login(t.app, bob.email);
    await patchMe(a.accessToken, { mfaEnabled: true });
    await patchMe(b.accessToken, { mfaEnabled: true });
    const started = (await enroll(a.accessToken)).json();
    const code = codeOf(smtp.last(alice.email));
    const stolen = await verify(b.accessToken, { challengeId: started.challengeId, code });
    assert.equal(stolen.statusCode, 400);
    assert.equal(stolen.json().error.details[0].reason, 'unknown_challenge');
    assert.equal(stolen.json().error.details[0].field, 'challengeId');
    const bobMe = await inject({ method: 'GET', url: '/api/user/me', headers: bearer(b.accessToken) });
    assert.equal(bobMe.json().data.mfaPending, true, 'bob is not enrolled by alice\'s code');
    assert.equal((await verify(a.accessToken, { challengeId: started.challengeId, code })).statusCode, 200);
  });

  test('a challenge of the other purpose is refused: enrolment at login/mfa, login at mfa-verify', async () => {
    const user = await newUser();
    const { accessToken } = await login(t.app, user.email);
    await patchMe(accessToken, { mfaEnabled: true });
    const started = (await enroll(accessToken)).json();
    const enrolCode = codeOf(smtp.last(user.email));
    const asLogin = await loginMfa({ challengeId: started.challengeId, code: enrolCode });
    assert.equal(asLogin.statusCode, 401);
    assert.equal(asLogin.json().error.details[0].reason, 'unknown_challenge');
    assert.equal(asLogin.json().accessToken, undefined);
    assert.equal((await verify(accessToken, { challengeId: started.challengeId, code: enrolCode })).statusCode, 200);

    const c = await challenge(user);
    const asEnrol = await verify(accessToken, c);
    // MFA is enrolled now, so the state check answers first; either way nothing is accepted.
    assert.equal(asEnrol.statusCode, 409);
    // A login challenge presented for enrolment by a user whose enrolment is pending.
    const other = await newUser();
    const o = await login(t.app, other.email);
    await updateUser(t.database.db, other.id, { mfaState: 'enrolled' }, clock.now());
    const oc = await challenge(other);
    await updateUser(t.database.db, other.id, { mfaState: 'pending' }, clock.now());
    const wrongPurpose = await verify(o.accessToken, oc);
    assert.equal(wrongPurpose.statusCode, 400);
    assert.equal(wrongPurpose.json().error.details[0].reason, 'unknown_challenge');
    assert.equal((await loginMfa(c)).statusCode, 200, 'the login challenge was not burnt');
  });

  test('at most 5 challenges per user per 15 minutes; the window slides with the clock', async () => {
    const user = await newUser();
    const neighbour = await newUser();
    await updateUser(t.database.db, user.id, { mfaState: 'enrolled' }, clock.now());
    await updateUser(t.database.db, neighbour.id, { mfaState: 'enrolled' }, clock.now());
    const startedAt = clock.now().getTime();
    for (let i = 0; i < 5; i++) {
      assert.equal((await passwordLogin(user)).json().mfaRequired, true);
      clock.advance(MIN);
    }
    const mails = smtp.countTo(user.email);
    const sixth = await passwordLogin(user);
    assert.equal(sixth.statusCode, 429);
    assert.equal(sixth.json().error.code, 'RATE_LIMITED');
    assert.equal(sixth.json().accessToken, undefined);
    // The oldest of the five leaves the window 15 minutes after it was created.
    const expected = Math.ceil((startedAt + 15 * MIN - clock.now().getTime()) / 1000);
    assert.equal(sixth.headers['retry-after'], String(expected));
    assert.equal(smtp.countTo(user.email), mails, 'no mail for a refused challenge');
    // Per user: the neighbour is not affected.
    assert.equal((await passwordLogin(neighbour)).json().mfaRequired, true);

    clock.advance(expected * 1000);
    const allowed = await passwordLogin(user);
    assert.equal(allowed.statusCode, 200);
    assert.equal(allowed.json().mfaRequired, true);
  });

  test('concurrent challenge requests never exceed the limit', async () => {
    const user = await newUser();
    await updateUser(t.database.db, user.id, { mfaState: 'enrolled' }, clock.now());
    const results = await Promise.all(Array.from({ length: 8 }, () => passwordLogin(user)));
    const codes = results.map((r) => r.statusCode).sort();
    assert.deepEqual(codes, [200, 200, 200, 200, 200, 429, 429, 429]);
    const rows = await t.database.db.select().from(mfaChallenges).where(eq(mfaChallenges.userId, user.id));
    assert.equal(rows.length, 5);
  });

  test('the enrolment endpoint shares the challenge limit', async () => {
    const user = await newUser();
    const { accessToken } = await login(t.app, user.email);
    await patchMe(accessToken, { mfaEnabled: true });
    for (let i = 0; i < 5; i++) assert.equal((await enroll(accessToken)).statusCode, 200);
    const res = await enroll(accessToken);
    assert.equal(res.statusCode, 429);
    assert.ok(Number(res.headers['retry-after']) > 0);
    clock.advance(15 * MIN + 1000);
  });

  test('revoking a trusted device makes its browser enter a code again', async () => {
    const user = await newUser();
    const { cookie, deviceId } = await enrolled(user);
    const skip = await passwordLogin(user, cookie);
    assert.ok(skip.json().accessToken);
    const token = skip.json().accessToken;

    const stranger = await newUser();
    const s = await login(t.app, stranger.email);
    const foreign = await inject({ method: 'DELETE', url: `/api/user/me/trusted-devices/${deviceId}`, headers: bearer(s.accessToken) });
    assert.equal(foreign.statusCode, 404);
    assert.equal(foreign.json().error.code, 'NOT_FOUND');
    assert.ok((await passwordLogin(user, cookie)).json().accessToken, 'another user cannot revoke it');

    const del = await inject({ method: 'DELETE', url: `/api/user/me/trusted-devices/${deviceId}`, headers: bearer(token) });
    assert.equal(del.statusCode, 200);
    assert.equal(del.json().success, true);
    assert.deepEqual(await devices(token), []);
    const again = await inject({ method: 'DELETE', url: `/api/user/me/trusted-devices/${deviceId}`, headers: bearer(token) });
    assert.equal(again.statusCode, 404);

    const res = await passwordLogin(user, cookie);
    assert.equal(res.json().mfaRequired, true);
    assert.equal(res.json().accessToken, undefined);
    // Re-trusting the same browser keeps its deviceId.
    const [old] = await t.database.db.select().from(trustedDevices).where(eq(trustedDevices.id, deviceId));
    const done = await loginMfa({ challengeId: res.json().challengeId, code: codeOf(smtp.last(user.email)) }, cookie);
    assert.equal(done.statusCode, 200);
    const list = await devices(done.json().accessToken);
    assert.equal(list.length, 1);
    assert.equal(list[0]!.deviceId, old!.deviceId);
    assert.notEqual(list[0]!.id, deviceId);
  });

  test('a cookie of another user, or a forged one, never skips the code', async () => {
    const alice = await newUser();
    const bob = await newUser();
    const a = await enrolled(alice);
    const b = await enrolled(bob);
    assert.equal((await passwordLogin(bob, a.cookie)).json().mfaRequired, true);
    const [id] = b.cookie.split('.');
    assert.equal((await passwordLogin(bob, `${id}.${'x'.repeat(43)}`)).json().mfaRequired, true, 'right id, wrong secret');
    assert.equal((await passwordLogin(bob, 'garbage')).json().mfaRequired, true);
    assert.ok((await passwordLogin(bob, b.cookie)).json().accessToken);
  });

  test('an expired trusted device (7 days) does not skip the code and is not listed', async () => {
    const user = await newUser();
    const { cookie } = await enrolled(user);
    clock.advance(7 * DAY - MIN);
    assert.ok((await passwordLogin(user, cookie)).json().accessToken, 'still valid on day 7');
    clock.advance(DAY + MIN);
    const res = await passwordLogin(user, cookie);
    assert.equal(res.json().mfaRequired, true);
    const done = await loginMfa({ challengeId: res.json().challengeId, code: codeOf(smtp.last(user.email)), rememberDevice: false });
    assert.deepEqual(await devices(done.json().accessToken), []);
  });

  test('cancel while pending: the enrolment code is refused and login needs no code', async () => {
    const user = await newUser();
    const { accessToken } = await login(t.app, user.email);
    await patchMe(accessToken, { mfaEnabled: true });
    const started = (await enroll(accessToken)).json();
    const code = codeOf(smtp.last(user.email));
    const cancel = await patchMe(accessToken, { mfaEnabled: false });
    assert.equal(cancel.statusCode, 200, 'no password is needed while pending');
    assert.equal(cancel.json().data.mfaEnabled, false);
    assert.equal(cancel.json().data.mfaPending, false);
    const late = await verify(accessToken, { challengeId: started.challengeId, code });
    assert.equal(late.statusCode, 409);
    assert.equal(late.json().error.code, 'CONFLICT');
    assert.equal(deviceCookieOf(late), undefined);
    assert.ok((await passwordLogin(user)).json().accessToken);
    assert.equal((await enroll(accessToken)).statusCode, 409);
  });

  test('turning off an enrolled MFA needs the password and revokes every trusted device', async () => {
    const user = await newUser();
    const { accessToken, cookie } = await enrolled(user);
    const c = await challenge(user);
    const second = await loginMfa(c);
    assert.equal((await devices(accessToken)).length, 2);
    const open = await challenge(user);

    const noPassword = await patchMe(accessToken, { mfaEnabled: false });
    assert.equal(noPassword.statusCode, 403);
    assert.equal((await patchMe(accessToken, { mfaEnabled: false, currentPassword: 'wrong password' })).statusCode, 403);
    assert.equal((await devices(accessToken)).length, 2);

    const off = await patchMe(accessToken, { mfaEnabled: false, currentPassword: PASSWORD });
    assert.equal(off.statusCode, 200);
    assert.equal(off.json().data.mfaEnabled, false);
    assert.deepEqual(await devices(accessToken), []);
    const rows = await t.database.db.select().from(trustedDevices).where(eq(trustedDevices.userId, user.id));
    assert.equal(rows.length, 2);
    assert.ok(rows.every((r) => r.revokedAt !== null));
    assert.equal((await loginMfa(open)).statusCode, 401, 'open login codes die with MFA');
    assert.ok((await passwordLogin(user)).json().accessToken, 'MFA is off');

    // Turned on again (after the challenge window), the old cookies do not skip the code.
    clock.advance(15 * MIN);
    await enrolled(user);
    const withOld = await passwordLogin(user, cookie);
    assert.equal(withOld.json().mfaRequired, true, withOld.body);
    assert.equal((await passwordLogin(user, deviceCookieOf(second)!.value)).json().mfaRequired, true);
  });

  test('a password change (own or by an admin) revokes trusted devices and open codes', async () => {
    // by its owner
    clock.advance(15 * MIN);
    const user = await newUser();
    const { accessToken, cookie } = await enrolled(user);
    const open = await challenge(user);
    const changed = await patchMe(accessToken, { password: 'another-password-1', currentPassword: PASSWORD });
    assert.equal(changed.statusCode, 200, changed.body);
    assert.deepEqual(await devices(accessToken), []);
    assert.equal((await loginMfa(open)).statusCode, 401, 'a code opened under the old password dies');
    const next = await inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: 'another-password-1' }, cookies: { tdid: cookie } });
    assert.equal(next.json().mfaRequired, true, 'the old trusted device no longer skips the code');

    // by an admin
    clock.advance(15 * MIN);
    const other = await newUser();
    const second = await enrolled(other);
    const admin = await makeUser(t.database, { accountId, role: 'accountadmin' });
    const adminLogin = await login(t.app, admin.email);
    const reset = await inject({ method: 'PATCH', url: `/api/admin/user/${other.id}`, headers: bearer(adminLogin.accessToken), payload: { password: 'reset-by-admin-1' } });
    assert.equal(reset.statusCode, 200, reset.body);
    const rows = await t.database.db.select().from(trustedDevices).where(eq(trustedDevices.userId, other.id));
    assert.ok(rows.length > 0 && rows.every((r) => r.revokedAt !== null));
    const after = await inject({ method: 'POST', url: '/api/auth/login', payload: { email: other.email, password: 'reset-by-admin-1' }, cookies: { tdid: second.cookie } });
    assert.equal(after.json().mfaRequired, true);
  });

  test('validation and authentication of the MFA routes', async () => {
    const user = await newUser();
    const { accessToken } = await login(t.app, user.email);
    assert.equal((await inject({ method: 'POST', url: '/api/user/me/mfa-enroll' })).statusCode, 401);
    assert.equal((await inject({ method: 'GET', url: '/api/user/me/trusted-devices' })).statusCode, 401);
    assert.equal((await inject({ method: 'POST', url: '/api/user/me/mfa-verify', payload: { challengeId: 'x', code: '123456' } })).statusCode, 401);
    const short = await verify(accessToken, { challengeId: '01a2017c-abf7-76ab-a42f-008531606a14', code: '12345' });
    assert.equal(short.statusCode, 400);
    assert.equal(short.json().error.code, 'VALIDATION_FAILED');
    assert.equal(short.json().error.details[0].field, 'code');
    const missing = await loginMfa({ code: '123456' });
    assert.equal(missing.statusCode, 400);
    assert.equal(missing.json().error.details[0].field, 'challengeId');
    const letters = await loginMfa({ challengeId: 'abc', code: '12a456' });
    assert.equal(letters.statusCode, 400);
    const badRemember = await loginMfa({ challengeId: 'abc', code: '123456', rememberDevice: 'yes' });
    assert.equal(badRemember.statusCode, 400);
    const unknown = await loginMfa({ challengeId: '0190aaaa-0000-7000-8000-000000000000', code: '123456' });
    assert.equal(unknown.statusCode, 401);
    assert.equal(unknown.json().error.details[0].reason, 'unknown_challenge');
  });

  test('the dev outbox is not used when SMTP is configured', async () => {
    assert.deepEqual(await listOutboxMessages(t.database.db, { limit: 50 }), []);
  });
});

describe('mfa: configuration variants', () => {
  test('COOKIE_SECURE=true adds Secure to the trusted-device cookie', async () => {
    const smtp = await startSmtp();
    const t = await startTestApp({ env: { SMTP_URL: smtp.url, COOKIE_SECURE: 'true' } });
    try {
      const account = await makeAccount(t.database);
      const user = await makeUser(t.database, { accountId: account.id });
      const { accessToken } = await login(t.app, user.email);
      await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { mfaEnabled: true } });
      const started = await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(accessToken) });
      const res = await t.app.inject({
        method: 'POST',
        url: '/api/user/me/mfa-verify',
        headers: bearer(accessToken),
        payload: { challengeId: started.json().challengeId, code: codeOf(smtp.last(user.email)) },
      });
      const cookie = deviceCookieOf(res);
      assert.ok(cookie);
      const attrs = cookie.raw.split(';').map((s) => s.trim().toLowerCase());
      assert.ok(attrs.includes('secure'), cookie.raw);
      assert.ok(attrs.includes('httponly'), cookie.raw);
      // The mail names the service alone when the user has no current institution.
      assert.match(smtp.last(user.email).text ?? '', /account at Twin Assistant:/);
    } finally {
      await t.close();
      await smtp.close();
    }
  });

  test('production: Secure cookie by default and no dev outbox (404)', async () => {
    const smtp = await startSmtp();
    const t = await startTestApp({
      env: {
        NODE_ENV: 'production',
        JWT_SECRET: 'production-secret-production-secret-0123456789',
        ENCRYPTION_KEY: 'production-encryption-key-production-key-0123',
        SMTP_URL: smtp.url,
      },
    });
    try {
      assert.equal(t.config.cookieSecure, true);
      const outbox = await t.app.inject({ method: 'GET', url: '/api/dev/outbox' });
      assert.equal(outbox.statusCode, 404);
      assert.equal(outbox.json().error.code, 'NOT_FOUND');

      const account = await makeAccount(t.database);
      const user = await makeUser(t.database, { accountId: account.id });
      const { accessToken } = await login(t.app, user.email);
      await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { mfaEnabled: true } });
      const started = await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(accessToken) });
      assert.equal(started.statusCode, 200);
      const res = await t.app.inject({
        method: 'POST',
        url: '/api/user/me/mfa-verify',
        headers: bearer(accessToken),
        payload: { challengeId: started.json().challengeId, code: codeOf(smtp.last(user.email)) },
      });
      assert.equal(res.statusCode, 200);
      const cookie = deviceCookieOf(res);
      assert.ok(cookie?.raw.split(';').map((s) => s.trim().toLowerCase()).includes('secure'), cookie?.raw);
    } finally {
      await t.close();
      await smtp.close();
    }
  });

  test('development without SMTP_URL: the code lands in the outbox, shown to a superadmin by GET /api/dev/outbox (DEV_OUTBOX=true)', async () => {
    const t = await startTestApp({ env: { NODE_ENV: 'development', DEV_OUTBOX: 'true' } });
    try {
      const rootAccount = await makeAccount(t.database);
      const root = await makeUser(t.database, { accountId: rootAccount.id, role: 'superadmin' });
      const rootToken = (await login(t.app, root.email)).accessToken;
      assert.equal(t.app.ctx.providers.mail.kind, 'outbox');
      assert.equal(t.config.cookieSecure, false);
      const account = await makeAccount(t.database);
      const inst = await makeInstitution(t.database, account.id, { name: 'Dev Lab', ainame: 'Curie' });
      const user = await makeUser(t.database, { accountId: account.id, memberships: { [inst.id]: 'user' } });
      const other = await makeUser(t.database, { accountId: account.id });
      const { accessToken } = await login(t.app, user.email);
      const o = await login(t.app, other.email);
      await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { mfaEnabled: true } });
      await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(o.accessToken), payload: { mfaEnabled: true } });
      const started = await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(accessToken) });
      assert.equal(started.statusCode, 200, started.body);
      assert.equal((await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(o.accessToken) })).statusCode, 200);

      const all = await t.app.inject({ method: 'GET', url: '/api/dev/outbox', headers: bearer(rootToken) });
      assert.equal(all.statusCode, 200);
      assert.equal(all.json().messages.length, 2);
      assert.equal(all.json().messages[0].to, other.email, 'latest first');

      const res = await t.app.inject({ method: 'GET', url: `/api/dev/outbox?to=${encodeURIComponent(user.email.toUpperCase())}`, headers: bearer(rootToken) });
      assert.equal(res.statusCode, 200);
      const messages = res.json().messages;
      assert.equal(messages.length, 1);
      const [m] = messages;
      assert.deepEqual(Object.keys(m).sort(), ['created', 'html', 'id', 'subject', 'text', 'to']);
      assert.equal(m.to, user.email);
      assert.match(m.text, /Dev Lab/);
      assert.match(m.text, /Curie/);
      const code = (m.text as string).match(/(?<!\d)\d{6}(?!\d)/)![0];
      assert.ok((m.html as string).includes(code));
      const verified = await t.app.inject({
        method: 'POST',
        url: '/api/user/me/mfa-verify',
        headers: bearer(accessToken),
        payload: { challengeId: started.json().challengeId, code },
      });
      assert.equal(verified.statusCode, 200, verified.body);
      assert.equal((await t.app.inject({ method: 'GET', url: '/api/dev/outbox?limit=0', headers: bearer(rootToken) })).statusCode, 400);
    } finally {
      await t.close();
    }
  });

  test('the outbox route exists in test mode only with DEV_OUTBOX=true', async () => {
    const t = await startTestApp({ env: { DEV_OUTBOX: 'true' } });
    try {
      const account = await makeAccount(t.database);
      const root = await makeUser(t.database, { accountId: account.id, role: 'superadmin' });
      const res = await t.app.inject({ method: 'GET', url: '/api/dev/outbox', headers: bearer((await login(t.app, root.email)).accessToken) });
      assert.equal(res.statusCode, 200);
      assert.deepEqual(res.json(), { success: true, messages: [] });
    } finally {
      await t.close();
    }
  });

  test('an unreachable SMTP server gives 502 UPSTREAM_FAILED, and the challenge still counts', async () => {
    const dead = await startSmtp();
    await dead.close(); // nothing listens on this port any more
    const t = await startTestApp({ env: { SMTP_URL: dead.url, MFA_CHALLENGES_PER_15_MIN: '2' } });
    try {
      const account = await makeAccount(t.database);
      const user = await makeUser(t.database, { accountId: account.id });
      const { accessToken } = await login(t.app, user.email);
      await t.app.inject({ method: 'PATCH', url: '/api/user/me', headers: bearer(accessToken), payload: { mfaEnabled: true } });
      const first = await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(accessToken) });
      assert.equal(first.statusCode, 502, first.body);
      assert.equal(first.json().error.code, 'UPSTREAM_FAILED');
      const rows = await t.database.db.select().from(mfaChallenges).where(eq(mfaChallenges.userId, user.id));
      assert.equal(rows.length, 1);
      assert.ok(rows[0]!.consumedAt, 'a code that was never delivered cannot be used');
      assert.equal((await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(accessToken) })).statusCode, 502);
      assert.equal((await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-enroll', headers: bearer(accessToken) })).statusCode, 429);
    } finally {
      await t.close();
    }
  });

  test('the code routes are rate limited per IP', async () => {
    const t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_IP: '3' } });
    try {
      const payload = { challengeId: '0190aaaa-0000-7000-8000-000000000000', code: '123456' };
      for (let i = 0; i < 3; i++) assert.equal((await t.app.inject({ method: 'POST', url: '/api/auth/login/mfa', payload })).statusCode, 401);
      const limited = await t.app.inject({ method: 'POST', url: '/api/auth/login/mfa', payload });
      assert.equal(limited.statusCode, 429);
      assert.equal(limited.json().error.code, 'RATE_LIMITED');
      assert.ok(Number(limited.headers['retry-after']) > 0);
      // Another IP is not affected.
      const elsewhere = await t.app.inject({ method: 'POST', url: '/api/auth/login/mfa', payload, remoteAddress: '10.1.2.3' });
      assert.equal(elsewhere.statusCode, 401);

      const account = await makeAccount(t.database);
      const user = await makeUser(t.database, { accountId: account.id });
      const token = (await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { email: user.email, password: PASSWORD }, remoteAddress: '10.9.9.9' })).json().accessToken;
      const verifyPayload = { challengeId: payload.challengeId, code: '123456' };
      for (let i = 0; i < 3; i++) {
        const r = await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-verify', headers: bearer(token), payload: verifyPayload, remoteAddress: '10.9.9.9' });
        assert.equal(r.statusCode, 409); // not pending
      }
      const r = await t.app.inject({ method: 'POST', url: '/api/user/me/mfa-verify', headers: bearer(token), payload: verifyPayload, remoteAddress: '10.9.9.9' });
      assert.equal(r.statusCode, 429);
    } finally {
      await t.close();
    }
  });
});
