import type { FastifyReply, FastifyRequest, preHandlerAsyncHookHandler } from 'fastify';
import type { AppContext } from '../context.js';
import { resolveAuth, tokenFromHeaders, type AuthContext } from '../modules/identity/auth-context.js';
import { holdsPermission, type Permission } from '../modules/tenancy/permissions.js';
import { forbidden, unauthenticated } from '../shared/errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    auth: AuthContext | null;
  }
}

/** OpenAPI security requirement of every authenticated route: either header. */
export const SECURED: Array<Record<string, string[]>> = [{ bearerAuth: [] }, { accessToken: [] }];

/** The authenticated caller; routes behind `requireAuth` always have one. */
export function authOf(request: FastifyRequest): AuthContext {
  if (!request.auth) throw unauthenticated();
  return request.auth;
}

/** The access token of the request (either header), or 401. */
export function accessTokenOf(request: FastifyRequest): string {
  const token = tokenFromHeaders(request.headers);
  if (!token) throw unauthenticated('Missing access token (Authorization: Bearer or x-access-token)');
  return token;
}

export function requireAuth(ctx: AppContext): preHandlerAsyncHookHandler {
  return async function authenticate(request: FastifyRequest, _reply: FastifyReply) {
    request.auth = await resolveAuth(ctx.db, ctx.tokens, accessTokenOf(request), ctx.clock.now(), ctx.auth);
  };
}

/** Authenticates, then requires the permission in at least one scope; the policy checks the target. */
export function requirePermission(ctx: AppContext, permission: Permission): preHandlerAsyncHookHandler[] {
  return [
    requireAuth(ctx),
    async function checkPermission(request: FastifyRequest) {
      if (!holdsPermission(authOf(request), permission)) throw forbidden(`Missing permission ${permission}`);
    },
  ];
}
