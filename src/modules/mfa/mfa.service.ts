import type { AppContext } from '../../context.js';
import { AppError, conflict, notFound, rateLimited, unauthenticated, upstreamFailed, type ErrorDetail } from '../../shared/errors.js';
import { keyedHash, numericCode, randomToken, safeEqualHex } from '../../shared/crypto.js';
import { isUuid, newId, newPublicId } from '../../shared/ids.js';
import type { AuthContext } from '../identity/auth-context.js';
import { findUserById, type UserRow } from '../identity/identity.repository.js';
import type { ClientMeta, LoginSecondFactor, MfaChallengeAnswer, SessionIssuer, TokenPair } from '../identity/identity.service.js';
import { composeCodeMail } from './mfa.mail.js';
import * as repo from './mfa.repository.js';
import type { ChallengePurpose, ChallengeRow, TrustedDeviceRow } from './mfa.repository.js';

/** Spec, Limits: a challenge lives 5 minutes and carries a 6-digit code. */
export const CODE_DIGITS = 6;
export const CHALLENGE_TTL_MS = 5 * 60_000;
/** Contract §3: at most 5 wrong codes per challenge, then it is dead. */
export const MAX_WRONG_CODES = 5;
/** Contract §3: at most N (config.mfaChallengesPerWindow, default 5) challenges per user per 15 minutes. */
export const CHALLENGE_WINDOW_MS = 15 * 60_000;
/** Spec: the trusted-device cookie lasts 7 days. */
export const DEVICE_TTL_SECONDS = 7 * 86_400;

/** Why a code was refused; sent as `error.details[0].reason` so that clients can react precisely. */
export type CodeRejection = 'unknown_challenge' | 'used' | 'too_many_attempts' | 'expired' | 'wrong_code';

/** `j***@example.com`: the first character of the local part, then asterisks, then the domain. */
export function maskEmail(email: string): string {
  const at = email.lastIndexOf('@');
  if (at < 1) return '***';
  return `${email.slice(0, 1)}***${email.slice(at)}`;
}

/** A device secret as issued (randomToken: base64url), with room for a longer one. */
const DEVICE_SECRET = /^[A-Za-z0-9_-]{16,128}$/;

/**
 * The cookie is `<trusted-device row id>.<random secret>`; only a keyed hash of the secret is stored. Anything
 * else (a cookie of another shape, a NUL, a percent-encoded byte) is no cookie: the browser is simply not trusted.
 */
export function parseDeviceCookie(value: string | undefined): { id: string; secret: string } | null {
  if (!value || value.length > 200) return null;
  const parts = value.split('.');
  if (parts.length !== 2 || !isUuid(parts[0]) || !DEVICE_SECRET.test(parts[1]!)) return null;
  return { id: parts[0], secret: parts[1]! };
}

export interface IssuedDevice {
  device: TrustedDeviceRow;
  /** Value of the trusted-device cookie for the browser. */
  cookie: string;
}

/**
 * MFA by e-mailed code and trusted devices (contract §3). It is the identity service's second factor:
 * after a correct password, a valid trusted-device cookie lets the user in; otherwise a login challenge
 * is e-mailed.
 */
export class MfaService implements LoginSecondFactor {
  constructor(
    private readonly ctx: AppContext,
    private readonly sessions: SessionIssuer,
  ) {}

  // ───────────── second factor at login ─────────────

  async check(user: UserRow, meta: ClientMeta): Promise<MfaChallengeAnswer | null> {
    if (await this.isTrustedDevice(user.id, meta.deviceCookie)) return null;
    const challenge = await this.openChallenge(user, 'login', meta);
    return { success: true, mfaRequired: true, challengeId: challenge.id, maskedEmail: maskEmail(user.email) };
  }

  /**
   * Second step of a login: a correct code of a login challenge opens a session. With rememberDevice
   * the browser also becomes a trusted device. Every refusal is a 401 and issues nothing.
   */
  async completeLogin(challengeId: string, code: string, rememberDevice: boolean, meta: ClientMeta): Promise<{ tokens: TokenPair; issued?: IssuedDevice }> {
    const challenge = await this.useCode('login', challengeId, code);
    const user = await findUserById(this.ctx.db, challenge.userId);
    if (!user) throw unauthenticated('Unknown challenge: log in again to receive a new code');
    await this.sessions.assertMayLogIn(user);
    // Trusting a device only means something while MFA is on (it may have been switched off meanwhile). The device
    // first: a session is the last thing opened, so that nothing after it can fail and leave it unheld.
    const issued = rememberDevice && user.mfaState === 'enrolled' ? await this.trustDevice(user.id, meta) : undefined;
    const tokens = await this.sessions.startSession(user, meta);
    return { tokens, issued };
  }

  // ───────────── enrolment ─────────────

  async enroll(auth: AuthContext, meta: ClientMeta): Promise<{ success: true; challengeId: string; maskedEmail: string }> {
    const user = await this.pendingUser(auth);
    const challenge = await this.openChallenge(user, 'enroll', meta);
    return { success: true, challengeId: challenge.id, maskedEmail: maskEmail(user.email) };
  }

  /** A correct code of the caller's enrolment challenge turns MFA on and trusts this browser. */
  async verifyEnrollment(auth: AuthContext, challengeId: string, code: string, meta: ClientMeta): Promise<IssuedDevice> {
    await this.pendingUser(auth);
    await this.useCode('enroll', challengeId, code, auth.userId);
    const now = this.ctx.clock.now();
    // A cancel (PATCH mfaEnabled false) may have happened between the check above and now.
    const enrolled = await repo.markEnrolled(this.ctx.db, auth.userId, now);
    this.ctx.auth.cache.invalidateUser(auth.userId); // mfaEnabled/mfaPending of GET /me
    if (!enrolled) throw conflict('No MFA enrolment is pending any more');
    return this.trustDevice(auth.userId, meta);
  }

  // ───────────── trusted devices ─────────────

  async listDevices(auth: AuthContext): Promise<TrustedDeviceRow[]> {
    return repo.listActiveDevices(this.ctx.db, auth.userId, this.ctx.clock.now());
  }

  async revokeDevice(auth: AuthContext, id: string): Promise<void> {
    if (!(await repo.revokeDevice(this.ctx.db, id, auth.userId, this.ctx.clock.now()))) throw notFound('Trusted device');
  }

  /** MFA switched off: no device may skip it any more, and no open code may be used. */
  async onDisabled(userId: string): Promise<void> {
    const now = this.ctx.clock.now();
    await repo.revokeAllDevices(this.ctx.db, userId, now);
    await repo.closeOpenChallenges(this.ctx.db, userId, now);
  }

  // ───────────── internals ─────────────

  private codeHash(challengeId: string, code: string): string {
    // Bound to the challenge: a hash copied onto another challenge row is worthless.
    return keyedHash(this.ctx.config.jwtSecret, `mfa-code:${challengeId}:${code}`);
  }

  private secretHash(secret: string): string {
    return keyedHash(this.ctx.config.jwtSecret, `trusted-device:${secret}`);
  }

  private async pendingUser(auth: AuthContext): Promise<UserRow> {
    const user = await findUserById(this.ctx.db, auth.userId);
    if (!user) throw notFound('User');
    if (user.mfaState === 'enrolled') throw conflict('MFA is already enrolled for this user');
    if (user.mfaState !== 'pending') throw conflict('No MFA enrolment is pending: first update the user with PATCH /api/user/me {"mfaEnabled": true}');
    return user;
  }

  /**
   * Creates a challenge and e-mails its code. The per-user window is counted under a lock of the
   * user's row, so concurrent requests cannot exceed it together.
   */
  private async openChallenge(user: UserRow, purpose: ChallengePurpose, meta: ClientMeta): Promise<ChallengeRow> {
    const { config, clock } = this.ctx;
    const now = clock.now();
    const id = newId();
    const code = numericCode(CODE_DIGITS);
    const challenge = await this.ctx.db.transaction(async (tx) => {
      await repo.lockUser(tx, user.id);
      const recent = await repo.challengesSince(tx, user.id, new Date(now.getTime() - CHALLENGE_WINDOW_MS));
      if (recent.count >= config.mfaChallengesPerWindow) {
        const freeAt = (recent.oldest?.getTime() ?? now.getTime()) + CHALLENGE_WINDOW_MS;
        const seconds = Math.max(1, Math.ceil((freeAt - now.getTime()) / 1000));
        throw rateLimited(seconds, `Too many codes requested: at most ${config.mfaChallengesPerWindow} every 15 minutes; try again in ${seconds} s`);
      }
      return repo.insertChallenge(tx, {
        id,
        userId: user.id,
        purpose,
        codeHash: this.codeHash(id, code),
        attempts: 0,
        expiresAt: new Date(now.getTime() + CHALLENGE_TTL_MS),
        ip: meta.ip,
        ua: meta.ua.slice(0, 512),
        createdAt: now,
      });
    });

    const institution = await repo.currentInstitutionOf(this.ctx.db, user.currentInstitutionId);
    const message = composeCodeMail({
      to: user.email,
      fname: user.fname,
      code,
      purpose,
      serviceName: config.serviceName,
      institution,
      expiresAt: challenge.expiresAt,
      lifetimeMinutes: CHALLENGE_TTL_MS / 60_000,
      timezone: user.timezone,
    });
    try {
      await this.ctx.providers.mail.send(message);
    } catch (err) {
      this.ctx.log.error({ err, challengeId: id }, 'the MFA code e-mail could not be sent');
      // The code never reached the user: close the challenge (it still counts, so a failing mail
      // server is not hammered).
      await repo.consumeChallenge(this.ctx.db, id, MAX_WRONG_CODES, now);
      throw upstreamFailed('The e-mail with the code could not be sent; try again later');
    }
    return challenge;
  }

  /**
   * Checks a code and uses the challenge up. Refusals: enrolment 400 VALIDATION_FAILED (the caller is
   * authenticated; a 401 would read as an ended session), login 401 UNAUTHENTICATED. A challenge of
   * another user or of the other purpose is answered like an unknown one.
   */
  private async useCode(purpose: ChallengePurpose, challengeId: string, code: string, userId?: string): Promise<ChallengeRow> {
    const now = this.ctx.clock.now();
    const refuse = (reason: CodeRejection, message: string, extra: Partial<ErrorDetail> = {}) => {
      const detail: ErrorDetail = { field: reason === 'unknown_challenge' ? 'challengeId' : 'code', message, reason, ...extra };
      return purpose === 'login' ? new AppError(401, 'UNAUTHENTICATED', message, [detail]) : new AppError(400, 'VALIDATION_FAILED', message, [detail]);
    };
    const again = purpose === 'login' ? 'log in again to receive a new code' : 'request a new code';

    const challenge = await repo.findChallenge(this.ctx.db, challengeId);
    if (!challenge || challenge.purpose !== purpose || (userId !== undefined && challenge.userId !== userId)) {
      throw refuse('unknown_challenge', `Unknown challenge: ${again}`);
    }
    if (challenge.consumedAt) throw refuse('used', `This code was already used: ${again}`);
    if (challenge.attempts >= MAX_WRONG_CODES) throw refuse('too_many_attempts', `Too many wrong codes for this challenge: ${again}`);
    if (challenge.expiresAt.getTime() <= now.getTime()) throw refuse('expired', `The code has expired: ${again}`);

    if (!safeEqualHex(challenge.codeHash, this.codeHash(challenge.id, code))) {
      const attempts = await repo.countWrongAttempt(this.ctx.db, challenge.id, MAX_WRONG_CODES);
      if (attempts === null) throw refuse('too_many_attempts', `This challenge is closed: ${again}`);
      const left = MAX_WRONG_CODES - attempts;
      throw refuse('wrong_code', left > 0 ? `Wrong code; ${left} attempt${left === 1 ? '' : 's'} left` : `Wrong code; the challenge is now closed after ${MAX_WRONG_CODES} wrong codes: ${again}`, {
        attemptsLeft: left,
      });
    }
    const used = await repo.consumeChallenge(this.ctx.db, challenge.id, MAX_WRONG_CODES, now);
    // Lost a race: another request used the code, or wrong guesses closed the challenge, meanwhile.
    if (!used) throw refuse('used', `This code is no longer valid: ${again}`);
    return used;
  }

  /** True when the cookie names an active trusted device of this user with the right secret; marks it used. */
  private async isTrustedDevice(userId: string, cookie: string | undefined): Promise<boolean> {
    const parsed = parseDeviceCookie(cookie);
    if (!parsed) return false;
    const device = await repo.findDevice(this.ctx.db, parsed.id);
    if (!device || device.userId !== userId || !safeEqualHex(device.secretHash, this.secretHash(parsed.secret))) return false;
    return repo.touchActiveDevice(this.ctx.db, device.id, userId, this.ctx.clock.now());
  }

  /**
   * Trusts the requesting browser for 7 days. A browser that proves an earlier device of the same user
   * keeps its deviceId (the earlier row, if still active, is replaced).
   */
  private async trustDevice(userId: string, meta: ClientMeta): Promise<IssuedDevice> {
    const now = this.ctx.clock.now();
    let deviceId = newPublicId();
    const parsed = parseDeviceCookie(meta.deviceCookie);
    if (parsed) {
      const previous = await repo.findDevice(this.ctx.db, parsed.id);
      if (previous && previous.userId === userId && safeEqualHex(previous.secretHash, this.secretHash(parsed.secret))) {
        deviceId = previous.deviceId;
        await repo.revokeDevice(this.ctx.db, previous.id, userId, now);
      }
    }
    const secret = randomToken(32);
    const device = await repo.insertDevice(this.ctx.db, {
      id: newId(),
      userId,
      deviceId,
      secretHash: this.secretHash(secret),
      sourceIp: meta.ip,
      ua: meta.ua.slice(0, 512),
      createdAt: now,
      lastUsedAt: now,
      expiresAt: new Date(now.getTime() + DEVICE_TTL_SECONDS * 1000),
    });
    return { device, cookie: `${device.id}.${secret}` };
  }
}
