import type { AppContext } from '../../context.js';
import { badField, forbidden, notFound, unauthenticated } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { AuthContext } from './auth-context.js';
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
 * trusted device); otherwise the answer carries the challenge that was e-mailed.
 */
export interface LoginSecondFactor {
  check(user: UserRow, meta: ClientMeta): Promise<MfaChallengeAnswer | null>;
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

/** Hook the MFA module uses when MFA is switched off (e.g. to revoke trusted devices). */
export type MfaDisabledHook = (userId: string) => Promise<void>;

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

export class IdentityService {
  secondFactor?: LoginSecondFactor;
  onMfaDisabled?: MfaDisabledHook;

  constructor(private readonly ctx: AppContext) {}

  /** Checks e-mail and password; unknown e-mail and wrong password are indistinguishable. */
  async verifyCredentials(email: string, password: string): Promise<UserRow> {
    const user = await repo.findUserByEmail(this.ctx.db, email);
    if (!user) {
      await burnPasswordCheck(password);
      throw unauthenticated(INVALID_LOGIN);
    }
    if (!(await verifyPassword(user.passwordHash, password))) throw unauthenticated(INVALID_LOGIN);
    if (user.status !== 'active') throw forbidden('This user is disabled');
    return user;
  }

  async login(email: string, password: string, meta: ClientMeta): Promise<TokenPair | MfaChallengeAnswer> {
    const user = await this.verifyCredentials(email, password);
    if (user.mfaState === 'enrolled' && this.secondFactor) {
      const challenge = await this.secondFactor.check(user, meta);
      if (challenge) return challenge;
    }
    return this.startSession(user, meta);
  }

  /** Opens a login session for a user whose identity is proven, and issues its first token pair. */
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

  async refresh(refreshToken: string): Promise<TokenPair> {
    const now = this.ctx.clock.now();
    const parsed = this.ctx.tokens.parseRefresh(refreshToken);
    if (!parsed) throw unauthenticated('Invalid refresh token');
    const next = this.ctx.tokens.newRefresh(parsed.sessionId);
    const session = await repo.rotateRefresh(this.ctx.db, parsed.sessionId, parsed.secretHash, next.hash, now);
    if (!session) {
      // Either the session is gone/expired/revoked, or this token was already used: a reused refresh
      // token means it may have been stolen, so the whole session ends.
      await repo.revokeSession(this.ctx.db, parsed.sessionId, 'refresh-token-reuse', now);
      this.ctx.auth.cache.invalidateSession(parsed.sessionId);
      throw unauthenticated('Refresh token is invalid or was already used; the session has been revoked');
    }
    const user = await repo.findUserById(this.ctx.db, session.userId);
    if (!user || user.status !== 'active') {
      await repo.revokeSession(this.ctx.db, session.id, 'user-disabled', now);
      this.ctx.auth.cache.invalidateSession(session.id);
      throw unauthenticated('User is disabled');
    }
    return this.pair(user, session.id, session.institutionId, next.token, now);
  }

  async logout(auth: AuthContext): Promise<void> {
    await repo.revokeSession(this.ctx.db, auth.sessionId, 'logout', this.ctx.clock.now());
    this.ctx.auth.cache.invalidateSession(auth.sessionId);
  }

  /** The caller's row, as read when the request was authenticated (no second query). */
  me(auth: AuthContext): UserRow {
    return auth.user;
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
    let mfaTurnedOff = false;
    if (patch.mfaEnabled === true && user.mfaState === 'off') changes.mfaState = 'pending';
    if (patch.mfaEnabled === false && user.mfaState !== 'off') {
      // Cancelling a pending enrolment needs no proof; switching off an enrolled MFA does.
      if (user.mfaState === 'enrolled') {
        if (!patch.currentPassword || !(await verifyPassword(user.passwordHash, patch.currentPassword))) {
          throw forbidden('currentPassword is required and must be correct to turn off multi-factor authentication');
        }
        mfaTurnedOff = true;
      }
      changes.mfaState = 'off';
    }
    const updated = Object.keys(changes).length > 0 ? await repo.updateUser(this.ctx.db, user.id, changes, now) : user;
    if (mfaTurnedOff && this.onMfaDisabled) await this.onMfaDisabled(user.id);
    // Whoever else holds a session, a trusted device or an open code of this user loses it; this session stays.
    if (changes.passwordHash) await endCredentials(this.ctx.db, user.id, 'password-changed', now, auth.sessionId);
    // every session of the user: the others are revoked, this one holds the old row
    if (updated !== user || mfaTurnedOff) this.ctx.auth.cache.invalidateUser(user.id);
    return updated ?? user;
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

  /** New token pair for the same session, now carrying another institution the caller belongs to. */
  async switchInstitution(auth: AuthContext, institutionId: string): Promise<TokenPair> {
    const now = this.ctx.clock.now();
    if (!auth.memberships.has(institutionId)) throw forbidden('You are not enrolled in this institution');
    const session = await repo.findSession(this.ctx.db, auth.sessionId);
    if (!session || session.revokedAt) throw unauthenticated('Session has ended');
    const next = this.ctx.tokens.newRefresh(session.id);
    const rotated = await repo.rotateRefresh(this.ctx.db, session.id, session.refreshHash, next.hash, now, institutionId);
    if (!rotated) throw unauthenticated('Session has ended');
    const user = await repo.updateUser(this.ctx.db, auth.userId, { currentInstitutionId: institutionId }, now);
    this.ctx.auth.cache.invalidateUser(auth.userId);
    if (!user) throw notFound('User');
    return this.pair(user, session.id, institutionId, next.token, now);
  }

  private async defaultInstitution(user: UserRow): Promise<string | null> {
    const enrolments = await repo.listEnrolments(this.ctx.db, user.id);
    if (user.currentInstitutionId && enrolments.some((e) => e.institutionId === user.currentInstitutionId)) return user.currentInstitutionId;
    return enrolments[0]?.institutionId ?? null;
  }

  private async pair(user: UserRow, sessionId: string, institutionId: string | null, refreshToken: string, now: Date): Promise<TokenPair> {
    const accessToken = await this.ctx.tokens.signAccess({ userId: user.id, sessionId, institutionId }, now);
    return {
      success: true,
      accessToken,
      refreshToken,
      expiresIn: this.ctx.tokens.accessTtlSeconds,
      user: presentUser({ ...user, currentInstitutionId: institutionId }),
    };
  }
}
