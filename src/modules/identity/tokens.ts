import { webcrypto } from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { keyedHash, randomToken, safeEqualHex } from '../../shared/crypto.js';
import { unauthenticated } from '../../shared/errors.js';

export interface AccessClaims {
  userId: string;
  sessionId: string;
  institutionId: string | null;
}

/** Access tokens whose signature was checked, kept so that each is checked once (see verifyAccess). */
const VERIFIED_MAX = 10_000;

/** Signs and checks access tokens (JWT, HS256) and makes/reads opaque refresh tokens `<sessionId>.<secret>`. */
export class TokenService {
  private readonly key: Uint8Array;
  /** The HMAC key imported once: jose would import the raw bytes again on every verification. */
  private cryptoKey: Promise<webcrypto.CryptoKey> | undefined;
  /** token → claims and expiry (ms), for tokens whose signature and claims were checked. */
  private readonly verified = new Map<string, { claims: AccessClaims; expMs: number; nbfMs: number }>();

  constructor(
    private readonly secret: string,
    readonly accessTtlSeconds: number,
    readonly refreshTtlSeconds: number,
  ) {
    this.key = new TextEncoder().encode(secret);
  }

  async signAccess(claims: AccessClaims, now: Date): Promise<string> {
    const iat = Math.floor(now.getTime() / 1000);
    return new SignJWT({ sid: claims.sessionId, inst: claims.institutionId, typ: 'access' })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(claims.userId)
      .setIssuedAt(iat)
      .setExpirationTime(iat + this.accessTtlSeconds)
      .sign(this.key);
  }

  /**
   * Checks signature and claims. A token that passed is remembered (bounded, oldest dropped first)
   * with its expiry, so that the HMAC check (about a quarter of the CPU of an authenticated request,
   * by profile) runs once per token rather than on every request; expiry and not-before are still
   * checked against `now` on every call. The result depends only on the token's bytes and the key,
   * which never changes for this service instance.
   */
  async verifyAccess(token: string, now: Date): Promise<AccessClaims> {
    const known = this.verified.get(token);
    if (known) {
      const nowMs = now.getTime();
      if (nowMs >= known.expMs) throw unauthenticated('Access token expired');
      if (nowMs >= known.nbfMs) return known.claims;
    }
    try {
      this.cryptoKey ??= webcrypto.subtle.importKey('raw', this.key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
      const key = (await this.cryptoKey) as unknown as Parameters<typeof jwtVerify>[1];
      const { payload } = await jwtVerify(token, key, { algorithms: ['HS256'], currentDate: now });
      if (payload.typ !== 'access' || typeof payload.sub !== 'string' || typeof payload.sid !== 'string' || typeof payload.exp !== 'number') {
        throw unauthenticated('Invalid access token');
      }
      const inst = typeof payload.inst === 'string' ? payload.inst : null;
      const claims: AccessClaims = { userId: payload.sub, sessionId: payload.sid, institutionId: inst };
      if (this.verified.size >= VERIFIED_MAX) this.verified.delete(this.verified.keys().next().value as string);
      this.verified.set(token, { claims, expMs: payload.exp * 1000, nbfMs: typeof payload.nbf === 'number' ? payload.nbf * 1000 : Number.NEGATIVE_INFINITY });
      return claims;
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw unauthenticated('Access token expired');
      if (err instanceof Error && err.name === 'AppError') throw err;
      throw unauthenticated('Invalid access token');
    }
  }

  /**
   * A fresh refresh token for a session and the hash to store for it. Its secret is a random nonce and a
   * MAC of the session id and the nonce, so a token this service issued for the session is recognised as
   * such later, after any number of rotations, without keeping the hashes of old tokens.
   */
  newRefresh(sessionId: string): { token: string; hash: string } {
    const nonce = randomToken(32);
    const secret = `${nonce}.${this.issuedMac(sessionId, nonce)}`;
    return { token: `${sessionId}.${secret}`, hash: this.hashRefresh(secret) };
  }

  /** The session, the hash to look the token up by, and whether this service issued it for that session (its MAC). */
  parseRefresh(token: string): { sessionId: string; secretHash: string; issued: boolean } | null {
    const dot = token.indexOf('.');
    if (dot <= 0 || dot === token.length - 1) return null;
    const sessionId = token.slice(0, dot);
    const secret = token.slice(dot + 1);
    const m = /^([\w-]{1,128})\.([0-9a-f]{64})$/u.exec(secret);
    const issued = m !== null && safeEqualHex(m[2]!, this.issuedMac(sessionId, m[1]!));
    return { sessionId, secretHash: this.hashRefresh(secret), issued };
  }

  private issuedMac(sessionId: string, nonce: string): string {
    return keyedHash(this.secret, `refresh-issued:${sessionId}:${nonce}`);
  }

  sameHash(a: string, b: string): boolean {
    return safeEqualHex(a, b);
  }

  private hashRefresh(secret: string): string {
    return keyedHash(this.secret, `refresh:${secret}`);
  }
}
