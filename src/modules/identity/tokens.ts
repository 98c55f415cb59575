import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { keyedHash, randomToken, safeEqualHex } from '../../shared/crypto.js';
import { unauthenticated } from '../../shared/errors.js';

export interface AccessClaims {
  userId: string;
  sessionId: string;
  institutionId: string | null;
}

/** Signs and checks access tokens (JWT, HS256) and makes/reads opaque refresh tokens `<sessionId>.<secret>`. */
export class TokenService {
  private readonly key: Uint8Array;

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

  async verifyAccess(token: string, now: Date): Promise<AccessClaims> {
    try {
      const { payload } = await jwtVerify(token, this.key, { algorithms: ['HS256'], currentDate: now });
      if (payload.typ !== 'access' || typeof payload.sub !== 'string' || typeof payload.sid !== 'string') {
        throw unauthenticated('Invalid access token');
      }
      const inst = typeof payload.inst === 'string' ? payload.inst : null;
      return { userId: payload.sub, sessionId: payload.sid, institutionId: inst };
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw unauthenticated('Access token expired');
      if (err instanceof Error && err.name === 'AppError') throw err;
      throw unauthenticated('Invalid access token');
    }
  }

  /** A fresh refresh token for a session and the hash to store for it. */
  newRefresh(sessionId: string): { token: string; hash: string } {
    const secret = randomToken(32);
    return { token: `${sessionId}.${secret}`, hash: this.hashRefresh(secret) };
  }

  parseRefresh(token: string): { sessionId: string; secretHash: string } | null {
    const dot = token.indexOf('.');
    if (dot <= 0 || dot === token.length - 1) return null;
    return { sessionId: token.slice(0, dot), secretHash: this.hashRefresh(token.slice(dot + 1)) };
  }

  sameHash(a: string, b: string): boolean {
    return safeEqualHex(a, b);
  }

  private hashRefresh(secret: string): string {
    return keyedHash(this.secret, `refresh:${secret}`);
  }
}
