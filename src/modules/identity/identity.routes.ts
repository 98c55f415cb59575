import { Type } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import { authOf, requireAuth, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import type { App } from '../../http/types.js';
import { errorResponses, SuccessOnly } from '../../shared/schemas.js';
import { presentUser } from './identity.presenters.js';
import { EnrolmentSchema, LoginBody, LoginResponse, MeResponse, PatchMeBody, RefreshBody, SwitchBody, TokenPairSchema } from './identity.schemas.js';
import { IdentityService, type ClientMeta } from './identity.service.js';

export const TRUSTED_DEVICE_COOKIE = 'tdid';

export function clientMeta(request: FastifyRequest): ClientMeta {
  const ua = request.headers['user-agent'];
  return { ip: request.ip, ua: typeof ua === 'string' ? ua : '', deviceCookie: request.cookies?.[TRUSTED_DEVICE_COOKIE] };
}

export async function identityRoutes(app: App, ctx: AppContext): Promise<IdentityService> {
  const service = new IdentityService(ctx);
  const authenticated = requireAuth(ctx);
  const { config } = ctx;
  const window = config.loginRateLimitWindowSeconds * 1000;

  app.post(
    '/api/auth/login',
    {
      schema: {
        tags: ['auth'],
        summary: 'Log in with e-mail and password',
        description:
          `Returns a token pair, or \`{mfaRequired, challengeId, maskedEmail}\` when MFA is enrolled and the browser has no valid trusted-device cookie. ` +
          `Unknown e-mail and wrong password give the same 401. Rate limited to ${config.loginRateLimitPerIp} attempts per IP and ` +
          `${config.loginRateLimitPerEmail} per e-mail address every ${config.loginRateLimitWindowSeconds} s (429 with Retry-After).`,
        body: LoginBody,
        response: { 200: LoginResponse, ...errorResponses(400, 401, 403, 429, 502) },
      },
      preHandler: limits(
        app,
        { max: config.loginRateLimitPerIp, timeWindowMs: window, key: (req) => `login-ip:${req.ip}` },
        {
          max: config.loginRateLimitPerEmail,
          timeWindowMs: window,
          key: (req) => `login-email:${String((req.body as { email?: unknown } | undefined)?.email ?? '').toLowerCase()}`,
        },
      ),
    },
    async (request) => service.login(request.body.email, request.body.password, clientMeta(request)),
  );

  app.post(
    '/api/auth/refresh',
    {
      schema: {
        tags: ['auth'],
        summary: 'Exchange a refresh token for a new token pair',
        description: 'Refresh tokens rotate: each works once. Presenting an already used one revokes its whole session.',
        body: RefreshBody,
        response: { 200: TokenPairSchema, ...errorResponses(400, 401) },
      },
    },
    async (request) => service.refresh(request.body.refreshToken),
  );

  app.post(
    '/api/auth/logout',
    {
      schema: { tags: ['auth'], summary: 'Revoke the session of the presented access token', security: SECURED, response: { 200: SuccessOnly, ...errorResponses(401) } },
      preValidation: authenticated,
    },
    async (request) => {
      await service.logout(authOf(request));
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
        description: 'Profile fields, password change (with currentPassword) and the MFA switch (see mfaEnabled).',
        security: SECURED,
        body: PatchMeBody,
        response: { 200: MeResponse, ...errorResponses(400, 401, 403) },
      },
      preValidation: authenticated,
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
        description: 'Returns a new token pair for the same session whose current institution is the given one (403 when not enrolled).',
        security: SECURED,
        body: SwitchBody,
        response: { 200: TokenPairSchema, ...errorResponses(400, 401, 403) },
      },
      preValidation: authenticated,
    },
    async (request) => service.switchInstitution(authOf(request), request.body.institution),
  );

  return service;
}
