import type { AppContext } from '../../context.js';
import type { DbOrTx } from '../../db/client.js';
import { badField, forbidden, notFound, unauthenticated } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import { resolveSessionToEnd, type AuthContext } from './auth-context.js';
import { assertMaySwitchTo, isActiveEnrolment, loginRefusal } from './identity.policy.js';
import { presentUser } from './identity.presenters.js';
import { endCredentials } from './credentials.js';
import * as repo from './identity.repository.js';
import type { UserRow } from './identity.repository.js';
import { burnPasswordCheck, hashPassword, verifyPassword } from './passwords.js';
import { touchAccountActivity } from '../tenancy/tenancy.repository.js';

export interface ClientMeta {
  ip: string;
  ua: string;
  /** Raw value of the trusted-device cookie, when the browser sent one. */
  deviceCookie?: string;
}

export interface TokenPair {
  success: true;
  accessToken: string;
  refreshToken: string;
  expiresIn: number;
  user: ReturnType<typeof presentUser>;
}

export interface MfaChallengeAnswer {
  success: true;
  mfaRequired: true;
  challengeId: string;
  maskedEmail: string;
}

/**
 * The second factor at login, implemented by the MFA module. `null` lets the user in (a valid
 * trusted device); otherwise the answer carries the challenge that was e-mailed. `onDisabled` runs
 * when the user switches MFA off, enrolled or pending (trusted devices and open codes end with it).
 */
export interface LoginSecondFactor {
  check(user: UserRow, meta: ClientMeta): Promise<MfaChallengeAnswer | null>;
  onDisabled(userId: string): Promise<void>;
}

export interface ProfilePatch {
  fname?: string;
  lname?: string;
  location?: string;
  timezone?: string;
  mfaEnabled?: boolean;
  currentPassword?: string;
  password?: string;
}

export const INVALID_LOGIN = 'Invalid e-mail or password';

export function isValidTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** Profile fields of a request as user-row changes, trimmed and checked (own profile and admin edits). */
export function profileChanges(input: Pick<ProfilePatch, 'fname' | 'lname' | 'location' | 'timezone'>): Partial<UserRow> {
  const changes: Partial<UserRow> = {};
  if (input.fname !== undefined) changes.fname = input.fname.trim();
  if (input.lname !== undefined) changes.lname = input.lname.trim();
  if (input.location !== undefined) changes.location = input.location.trim();
  if (input.timezone !== undefined) {
    if (!isValidTimezone(input.timezone)) throw badField('timezone', `timezone must be an IANA time zone name (got "${input.timezone}")`);
    changes.timezone = input.timezone;
  }
  return changes;
}

/**
 * Opens login sessions and issues token pairs: shared by the password login and the MFA login, so
 * that the MFA module needs this, not the whole identity service.
 */
export class SessionIssuer {
  constructor(private readonly ctx: AppContext) {}

  /** Opens a login session for a user whose identity is proven (password and, if enrolled, second factor). */
  async startSession(user: UserRow, meta: ClientMeta): Promise<TokenPair> {
    const now = this.ctx.clock.now();
    const institutionId = await this.defaultInstitution(user);
    const sessionId = newId();
    const refresh = this.ctx.tokens.newRefresh(sessionId);
    await repo.insertSession(this.ctx.db, {
      id: sessionId,
      userId: user.id,
      accountId: user.accountId,
      institutionId,
      refreshHash: refresh.hash,
      ip: meta.ip,
      ua: meta.ua.slice(0, 512),
      createdAt: now,
      lastActivityAt: now,
      expiresAt: new Date(now.getTime() + this.ctx.tokens.refreshTtlSeconds * 1000),
    });
    const updated = (await repo.updateUser(this.ctx.db, user.id, { lastLoginAt: now, currentInstitutionId: institutionId }, now)) ?? user;
    this.ctx.auth.cache.invalidateUser(user.id); // lastLoginAt and the current institution of the user's other sessions
    await touchAccountActivity(this.ctx.db, user.accountId, now);
    return this.pair(updated, sessionId, institutionId, refresh.token, now);
  }

  /**
   * Refuses a login (password or second step) of a user who may not have a session: disabled, of an
   * inactive account, or whose every institution is inactive (row 5 of issue 7).
   */
  async assertMayLogIn(user: UserRow): Promise<void> {
    const refusal = await this.refusalFor(user);
    if (refusal) throw forbidden(refusal);
  }

  /** Why the user may not hold a session (identity.policy loginRefusal), or null. */
  async refusalFor(user: UserRow, db: DbOrTx = this.ctx.db): Promise<string | null> {
    const enrolments = await repo.listEnrolments(db, user.id);
    return loginRefusal(user, await repo.accountStatus(db, user.accountId), enrolments);
  }

  /** The current institution at login: the last one used if still active and enrolled, else the first active one. */
  private async defaultInstitution(user: UserRow): Promise<string | null> {
    return this.institutionFor(user, user.currentInstitutionId);
  }

  /** `preferred` while the user is actively enrolled there, else the user's first active institution (null: none). */
  async institutionFor(user: UserRow, preferred: string | null, db: DbOrTx = this.ctx.db): Promise<string | null> {
    const enrolments = (await repo.listEnrolments(db, user.id)).filter(isActiveEnrolment);
    if (preferred && enrolments.some((e) => e.institutionId === preferred)) return preferred;
    return enrolments[0]?.institutionId ?? null;
  }

  async accessToken(user: UserRow, sessionId: string, institutionId: string | null, now: Date): Promise<AccessAnswer> {
    const accessToken = await this.ctx.tokens.signAccess({ userId: user.id, sessionId, institutionId }, now);
    return { success: true, accessToken, expiresIn: this.ctx.tokens.accessTtlSeconds, user: presentUser({ ...user, currentInstitutionId: institutionId }) };
  }

  async pair(user: UserRow, sessionId: string, institutionId: string | null, refreshToken: string, now: Date): Promise<TokenPair> {
    const access = await this.accessToken(user, sessionId, institutionId, now);
    return { success: true, accessToken: access.accessToken, refreshToken, expiresIn: access.expiresIn, user: access.user };
  }
}

export interface AccessAnswer {
  success: true;
  accessToken: string;
  expiresIn: number;
  user: ReturnType<typeof presentUser>;
}

export class IdentityService {
  /**
   * The second factor is a constructor argument, not an optional hook: an identity service that could
   * exist without it would let MFA-enrolled users in with the password alone (it failed open before).
   */
  constructor(
    private readonly ctx: AppContext,
    private readonly sessions: SessionIssuer,
    readonly secondFactor: LoginSecondFactor,
  ) {}

  /** Checks e-mail and password; unknown e-mail and wrong password are indistinguishable. */
  async verifyCredentials(email: string, password: string): Promise<UserRow> {
    const user = await repo.findUserByEmail(this.ctx.db, email);
    if (!user) {
      await burnPasswordCheck(password);
      throw unauthenticated(INVALID_LOGIN);
    }
    if (!(await verifyPassword(user.passwordHash, password))) throw unauthenticated(INVALID_LOGIN);
    await this.sessions.assertMayLogIn(user);
    return user;
  }

  async login(email: string, password: string, meta: ClientMeta): Promise<TokenPair | MfaChallengeAnswer> {
    const user = await this.verifyCredentials(email, password);
    if (user.mfaState === 'enrolled') {
      // Fails closed: without a second factor to ask, an enrolled user does not get in.
      if (!this.secondFactor) throw forbidden('Multi-factor authentication is required for this user but is not available');
      const challenge = await this.secondFactor.check(user, meta);
      if (challenge) return challenge;
    }
    return this.sessions.startSession(user, meta);
  }

  /**
   * A refresh token that could not be rotated: when it was valid for its session once and has been rotated away since
   * (a copy of it exists), the session is revoked, here and on every node, and this is the 401 that says so. Otherwise
   * (a guess, an ended session) it returns and the caller refuses it in its own words.
   */
  private async revokeOnReuse(parsed: { sessionId: string; secretHash: string; issued: boolean }, now: Date): Promise<void> {
    if (!(await repo.revokeOnReuse(this.ctx.db, parsed.sessionId, parsed.secretHash, parsed.issued, now))) return;
    this.ctx.auth.cache.invalidateSession(parsed.sessionId);
    throw unauthenticated('This refresh token was already used; the session has been revoked');
  }

  /**
   * Rotates a refresh token. A token whose secret was never valid for the session (a guess, or a session id read
   * from a JWT) is refused and changes nothing; only a token that WAS valid and has already been rotated away (any
   * earlier one: tokens carry a MAC of their session) proves a copy exists, and revokes the session (revokeOnReuse).
   *
   * The rotation and the check that the user may still hold the session run in one transaction. A refusal
   * that does not end the session (an inactive account, every institution inactive) rolls the rotation back: the
   * client keeps the only token it has, which works again once the account is reactivated (rotated away, it would
   * have been taken for a stolen copy). The session's current institution is kept while the user is still actively
   * enrolled there; otherwise the session moves to the institution a login would pick (or none), as GET /api/user/me
   * and the new token then say.
   */
  async refresh(refreshToken: string): Promise<TokenPair> {
    const now = this.ctx.clock.now();
    const parsed = this.ctx.tokens.parseRefresh(refreshToken);
    if (!parsed) throw unauthenticated('Invalid refresh token');
    const next = this.ctx.tokens.newRefresh(parsed.sessionId);
    const outcome = await this.ctx.db.transaction(async (tx) => {
      const session = await repo.rotateRefresh(tx, parsed.sessionId, parsed.secretHash, next.hash, now);
      if (!session) return { kind: 'invalid' } as const;
      const user = await repo.findUserById(tx, session.userId);
      if (!user || user.status !== 'active') {
        await repo.revokeSession(tx, session.id, 'user-disabled', now);
        return { kind: 'disabled', sessionId: session.id } as const;
      }
      const refusal = await this.sessions.refusalFor(user, tx);
      if (refusal) throw unauthenticated(refusal); // the rotation is rolled back with the transaction
      const institutionId = await this.sessions.institutionFor(user, session.institutionId, tx);
      if (institutionId !== session.institutionId) await repo.setSessionInstitution(tx, session.id, institutionId, now);
      return { kind: 'rotated', user, sessionId: session.id, institutionId, moved: institutionId !== session.institutionId } as const;
    });
    if (outcome.kind === 'invalid') {
      await this.revokeOnReuse(parsed, now);
      throw unauthenticated('Refresh token is invalid or its session has ended');
    }
    if (outcome.kind === 'disabled') {
      this.ctx.auth.cache.invalidateSession(outcome.sessionId);
      throw unauthenticated('User is disabled');
    }
    if (outcome.moved) this.ctx.auth.cache.invalidateSession(outcome.sessionId);
    return this.sessions.pair(outcome.user, outcome.sessionId, outcome.institutionId, next.token, now);
  }

  /**
   * Ends the session of the presented access token: one that exists, is the token user's and is neither revoked
   * nor expired (401 otherwise), whatever the identity policy would refuse now (resolveSessionToEnd): a user who
   * was disabled or whose account or institutions went inactive ends their session too, instead of leaving it to
   * work again once reactivated. The session leaves the auth cache here and on every other node.
   */
  async logout(accessToken: string): Promise<void> {
    const now = this.ctx.clock.now();
    const { sessionId } = await resolveSessionToEnd(this.ctx.db, this.ctx.tokens, accessToken, now, this.ctx.auth);
    await repo.revokeSession(this.ctx.db, sessionId, 'logout', now);
    this.ctx.auth.cache.invalidateSession(sessionId);
  }

  /**
   * The caller's row, as read when the request was authenticated (no second query), with the current
   * institution of this session: the one its token carries, while the caller is an active member of it
   * (an inactive one is none). The row's own column is the last one any session logged in to or switched
   * to, which another session of the same user may have changed since.
   */
  me(auth: AuthContext): UserRow {
    return asSeenBy(auth.user, auth);
  }

  async updateMe(auth: AuthContext, patch: ProfilePatch): Promise<UserRow> {
    const now = this.ctx.clock.now();
    const user = this.me(auth);
    const changes: Partial<UserRow> = profileChanges(patch);
    if (patch.password !== undefined) {
      if (!patch.currentPassword || !(await verifyPassword(user.passwordHash, patch.currentPassword))) {
        throw forbidden('currentPassword is required and must be correct to change the password');
      }
      changes.passwordHash = await hashPassword(patch.password);
    }
    if (patch.mfaEnabled === true && user.mfaState === 'off') changes.mfaState = 'pending';
    if (patch.mfaEnabled === false && user.mfaState !== 'off') {
      // Cancelling a pending enrolment needs no proof; switching off an enrolled MFA does.
      if (user.mfaState === 'enrolled') {
        if (!patch.currentPassword || !(await verifyPassword(user.passwordHash, patch.currentPassword))) {
          throw forbidden('currentPassword is required and must be correct to turn off multi-factor authentication');
        }
      }
      changes.mfaState = 'off';
    }
    const updated = Object.keys(changes).length > 0 ? await repo.updateUser(this.ctx.db, user.id, changes, now) : user;
    // switched off, or a pending enrolment cancelled: no open code (an enrolment's included) and no trusted device outlives it
    if (changes.mfaState === 'off') await this.secondFactor.onDisabled(user.id);
    // Whoever else holds a session, a trusted device or an open code of this user loses it; this session stays.
    if (changes.passwordHash) await endCredentials(this.ctx.db, user.id, 'password-changed', now, auth.sessionId);
    // every session of the user: the others are revoked, this one holds the old row
    if (updated !== user || changes.mfaState === 'off') this.ctx.auth.cache.invalidateUser(user.id);
    // the row as written, with this session's institution (as me() shows it)
    return updated ? asSeenBy(updated, auth) : user;
  }

  async institutions(auth: AuthContext) {
    const rows = await repo.listEnrolments(this.ctx.db, auth.userId);
    return rows.map((r) => ({
      _id: r.institutionId,
      name: r.name,
      ainame: r.ainame,
      picture: r.picture,
      publicId: r.publicId,
      status: r.status,
      account: r.accountId,
      role: r.role,
      current: r.institutionId === auth.institutionId,
    }));
  }

  /**
   * Another current institution for the same session. With only the access token the answer is a new
   * access token (refresh tokens come only from a login or a refresh token); with the session's current
   * refresh token in the body, the pair is rotated. Either way the session remembers the institution.
   */
  async switchInstitution(auth: AuthContext, institutionId: string, refreshToken?: string): Promise<TokenPair | AccessAnswer> {
    const now = this.ctx.clock.now();
    assertMaySwitchTo(auth, institutionId);
    let answer: { sessionId: string; refreshToken?: string };
    if (refreshToken !== undefined) {
      const parsed = this.ctx.tokens.parseRefresh(refreshToken);
      if (!parsed || parsed.sessionId !== auth.sessionId) throw unauthenticated('The refresh token does not belong to this session');
      const next = this.ctx.tokens.newRefresh(auth.sessionId);
      const rotated = await repo.rotateRefresh(this.ctx.db, auth.sessionId, parsed.secretHash, next.hash, now, institutionId);
      if (!rotated) {
        await this.revokeOnReuse(parsed, now);
        throw unauthenticated('The refresh token is not the current one of this session');
      }
      answer = { sessionId: rotated.id, refreshToken: next.token };
    } else {
      const moved = await repo.setSessionInstitution(this.ctx.db, auth.sessionId, institutionId, now);
      if (!moved) throw unauthenticated('Session has ended');
      answer = { sessionId: auth.sessionId };
    }
    const user = await repo.updateUser(this.ctx.db, auth.userId, { currentInstitutionId: institutionId }, now);
    this.ctx.auth.cache.invalidateUser(auth.userId);
    if (!user) throw notFound('User');
    if (answer.refreshToken) return this.sessions.pair(user, answer.sessionId, institutionId, answer.refreshToken, now);
    return this.sessions.accessToken(user, answer.sessionId, institutionId, now);
  }
}

/** A user row with the current institution of the session asking (its token's), in place of the column another session may have set. */
function asSeenBy(row: UserRow, auth: AuthContext): UserRow {
  return row.currentInstitutionId === auth.institutionId ? row : { ...row, currentInstitutionId: auth.institutionId };
}
