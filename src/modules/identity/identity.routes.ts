import { Type } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import { accessTokenOf, authOf, requireAuth, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import type { App } from '../../http/types.js';
import { errorResponses, SuccessOnly } from '../../shared/schemas.js';
import { presentUser } from './identity.presenters.js';
import { MfaService } from '../mfa/mfa.service.js';
import { EnrolmentSchema, LoginBody, LoginResponse, MeResponse, PatchMeBody, RefreshBody, SwitchBody, SwitchResponse, TokenPairSchema } from './identity.schemas.js';
import { IdentityService, SessionIssuer, type ClientMeta } from './identity.service.js';

export const TRUSTED_DEVICE_COOKIE = 'tdid';

export function clientMeta(request: FastifyRequest): ClientMeta {
  const ua = request.headers['user-agent'];
  return { ip: request.ip, ua: typeof ua === 'string' ? ua : '', deviceCookie: request.cookies?.[TRUSTED_DEVICE_COOKIE] };
}

export async function identityRoutes(app: App, ctx: AppContext): Promise<IdentityService> {
  const sessions = new SessionIssuer(ctx);
  // The second factor is built first and handed to the identity service: it cannot exist without one.
  const service = new IdentityService(ctx, sessions, new MfaService(ctx, sessions));
  const authenticated = requireAuth(ctx);
  const { config } = ctx;
  const window = config.loginRateLimitWindowSeconds * 1000;
  const passwordCheckLimit = limits(app, { max: config.passwordCheckRateLimitPerUser, timeWindowMs: window, key: (req) => `password-check:${authOf(req).userId}` });
  /** Only requests that make the server check a password count (guessing currentPassword). */
  const passwordChecks = async (request: FastifyRequest, reply: FastifyReply) => {
    if ((request.body as { currentPassword?: unknown } | undefined)?.currentPassword !== undefined) await passwordCheckLimit.call(app, request, reply);
  };

  app.post(
    '/api/auth/login',
    {
      schema: {
        tags: ['auth'],
        summary: 'Log in with e-mail and password',
        description:
          `Returns a token pair, or \`{mfaRequired, challengeId, maskedEmail}\` when MFA is enrolled and the browser has no valid trusted-device cookie. ` +
          `Unknown e-mail and wrong password give the same 401. A disabled user, a user of an inactive account, and a plain user whose ` +
          `every institution is inactive get 403. Rate limited to ${config.loginRateLimitPerIp} attempts per IP and ` +
          `${config.loginRateLimitPerEmail} per e-mail address from one IP every ${config.loginRateLimitWindowSeconds} s (429 with Retry-After). ` +
          'The per-address limit counts each client IP apart, so that guesses from one address never lock the owner out from another ' +
          '(lockout as a denial of service); guesses spread over many addresses are bounded by the per-IP limit and the cost of the password hash.',
        body: LoginBody,
        response: { 200: LoginResponse, ...errorResponses(400, 401, 403, 429, 502) },
      },
      preHandler: limits(
        app,
        { max: config.loginRateLimitPerIp, timeWindowMs: window, key: (req) => `login-ip:${req.ip}` },
        {
          max: config.loginRateLimitPerEmail,
          timeWindowMs: window,
          key: (req) => `login-email:${req.ip}:${String((req.body as { email?: unknown } | undefined)?.email ?? '').trim().normalize('NFC').toLowerCase()}`,
        },
      ),
    },
    // surrounding spaces (a pasted address) are not part of it: admins' user creation trims them too
    async (request) => service.login(request.body.email.trim(), request.body.password, clientMeta(request)),
  );

  app.post(
    '/api/auth/refresh',
    {
      schema: {
        tags: ['auth'],
        summary: 'Exchange a refresh token for a new token pair',
        description:
          'Refresh tokens rotate: each works once. Presenting the token the last rotation replaced (a once-valid token used again: a copy ' +
          'exists) revokes the whole session. A token whose secret never belonged to the session is a plain 401 and revokes nothing, so ' +
          'knowing a session id (it is in every access token) does not let anyone log its owner out. While the user\'s account, or ' +
          'every institution of a plain user, is inactive the refresh is a 401 that rotates nothing: the same token works again once ' +
          'reactivated. The new pair carries the session\'s institution while the user is still actively enrolled there, else the one a ' +
          'login would pick (or none), and the session moves to it.',
        body: RefreshBody,
        response: { 200: TokenPairSchema, ...errorResponses(400, 401) },
      },
    },
    async (request) => service.refresh(request.body.refreshToken),
  );

  app.post(
    '/api/auth/logout',
    {
      schema: {
        tags: ['auth'],
        summary: 'Revoke the session of the presented access token',
        description:
          'Ends the session of the access token (only that one), which must exist, be the token user\'s and be neither revoked nor expired ' +
          '(401 otherwise). Unlike every other authenticated route, it works while the user is disabled, their account is inactive or ' +
          'every institution of a plain user is inactive: such a user ends their own session, which would otherwise work again once ' +
          'reactivated. On every other route the token of such a user is a 401, before the logout as after.',
        security: SECURED,
        response: { 200: SuccessOnly, ...errorResponses(401) },
      },
    },
    // not behind `authenticated`: that refuses the users whose session this must still end (IdentityService.logout)
    async (request) => {
      await service.logout(accessTokenOf(request));
      return { success: true, message: 'Logged out' };
    },
  );

  app.get(
    '/api/user/me',
    { schema: { tags: ['user'], summary: 'The current user', security: SECURED, response: { 200: MeResponse, ...errorResponses(401) } }, preValidation: authenticated },
    async (request) => ({ success: true, data: presentUser(service.me(authOf(request))) }),
  );

  app.patch(
    '/api/user/me',
    {
      schema: {
        tags: ['user'],
        summary: 'Update the current user',
        description:
          'Profile fields, password change (with currentPassword) and the MFA switch (see mfaEnabled). A request carrying currentPassword ' +
          `counts against a limit of ${config.passwordCheckRateLimitPerUser} password checks per user every ${config.loginRateLimitWindowSeconds} s ` +
          '(429 RATE_LIMITED with Retry-After beyond; requests without currentPassword are not limited).',
        security: SECURED,
        body: PatchMeBody,
        response: { 200: MeResponse, ...errorResponses(400, 401, 403, 429) },
      },
      preValidation: authenticated,
      preHandler: passwordChecks,
    },
    async (request) => ({ success: true, data: presentUser(await service.updateMe(authOf(request), request.body)) }),
  );

  app.get(
    '/api/user/institutions',
    {
      schema: {
        tags: ['user'],
        summary: 'Institutions the current user is enrolled in',
        security: SECURED,
        response: { 200: Type.Object({ success: Type.Boolean(), data: Type.Array(EnrolmentSchema) }), ...errorResponses(401) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await service.institutions(authOf(request)) }),
  );

  app.post(
    '/api/user/institution/switch',
    {
      schema: {
        tags: ['user'],
        summary: 'Switch the current institution',
        description:
          'The same session now carries the given institution (403 when the caller is not enrolled in it or it is inactive). Refresh tokens ' +
          'come only from a login or a refresh token, never from an access token alone: with only the access token the answer is ' +
          '`{success, accessToken, expiresIn, user}` (no refreshToken; the session\'s refresh token keeps working and its next use carries ' +
          'the new institution). With `refreshToken` (the session\'s current one) in the body the pair is rotated and both are returned; ' +
          'a refresh token of another session, or not the current one, is a 401 and changes nothing.',
        security: SECURED,
        body: SwitchBody,
        response: { 200: SwitchResponse, ...errorResponses(400, 401, 403) },
      },
      preValidation: authenticated,
    },
    async (request) => service.switchInstitution(authOf(request), request.body.institution, request.body.refreshToken),
  );

  return service;
}
