import type { FastifyReply } from 'fastify';
import type { AppContext } from '../../context.js';
import { authOf, requireAuth, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import type { App } from '../../http/types.js';
import { listOutboxMessages } from '../../providers/mail/outbox.js';
import { errorResponses, SuccessOnly } from '../../shared/schemas.js';
import { clientMeta, TRUSTED_DEVICE_COOKIE } from '../identity/identity.routes.js';
import { TokenPairSchema } from '../identity/identity.schemas.js';
import type { IdentityService } from '../identity/identity.service.js';
import { assertOutboxReader } from './mfa.policy.js';
import { presentDevice, presentOutboxMessage } from './mfa.presenters.js';
import { DeviceParams, DevicesResponse, EnrollResponse, LoginMfaBody, OutboxQuery, OutboxResponse, VerifyBody, VerifyResponse } from './mfa.schemas.js';
import { DEVICE_TTL_SECONDS, MAX_WRONG_CODES, MfaService, type IssuedDevice } from './mfa.service.js';

const CODE_RULES =
  `Codes have 6 digits, are valid 5 minutes and work once; a challenge is closed after ${MAX_WRONG_CODES} wrong codes. ` +
  'A refusal names its reason in `error.details[0].reason`: unknown_challenge (also a challenge of another user or of the other purpose), ' +
  'used, too_many_attempts, expired or wrong_code (with `attemptsLeft`).';

/** MFA enrolment, login second factor, trusted devices, dev outbox (contract §3). */
export async function mfaRoutes(app: App, ctx: AppContext, identity: IdentityService): Promise<void> {
  // The identity service was built with its second factor (identityRoutes): these routes serve that one.
  const service = identity.secondFactor;
  if (!(service instanceof MfaService)) throw new Error('The identity service must be built with the MFA service as its second factor');

  const { config } = ctx;
  const authenticated = requireAuth(ctx);
  const window = config.loginRateLimitWindowSeconds * 1000;
  const perIp = (name: string) => limits(app, { max: config.loginRateLimitPerIp, timeWindowMs: window, key: (req) => `${name}:${req.ip}` });
  const challengeLimit = `At most ${config.mfaChallengesPerWindow} codes are sent per user every 15 minutes (429 RATE_LIMITED with Retry-After).`;
  const ipLimit = `Rate limited to ${config.loginRateLimitPerIp} requests per IP every ${config.loginRateLimitWindowSeconds} s (429 with Retry-After).`;

  /** HttpOnly, SameSite=Lax, Path=/, 7 days; Secure when COOKIE_SECURE (default on in production). */
  const setDeviceCookie = (reply: FastifyReply, issued: IssuedDevice) =>
    reply.setCookie(TRUSTED_DEVICE_COOKIE, issued.cookie, { httpOnly: true, sameSite: 'lax', path: '/', maxAge: DEVICE_TTL_SECONDS, secure: config.cookieSecure });

  app.post(
    '/api/user/me/mfa-enroll',
    {
      schema: {
        tags: ['mfa'],
        summary: 'Send the enrolment code of a pending MFA',
        description:
          'No body. Needs MFA pending (after PATCH /api/user/me {mfaEnabled: true}); otherwise 409 CONFLICT. Creates a challenge valid 5 minutes and ' +
          `e-mails its 6-digit code. Verify it with POST /api/user/me/mfa-verify. ${challengeLimit} 502 UPSTREAM_FAILED when the e-mail cannot be sent.`,
        security: SECURED,
        response: { 200: EnrollResponse, ...errorResponses(401, 409, 429, 502) },
      },
      preValidation: authenticated,
    },
    async (request) => service.enroll(authOf(request), clientMeta(request)),
  );

  app.post(
    '/api/user/me/mfa-verify',
    {
      schema: {
        tags: ['mfa'],
        summary: 'Verify the enrolment code: MFA becomes enrolled',
        description:
          'With the correct code of the caller\'s enrolment challenge, MFA is enrolled and this browser becomes a trusted device: the response sets ' +
          `the trusted-device cookie (HttpOnly, SameSite=Lax, 7 days). A refused code is a 400 VALIDATION_FAILED (not 401: the caller is authenticated). ` +
          `${CODE_RULES} 409 CONFLICT when no enrolment is pending. ${ipLimit}`,
        security: SECURED,
        body: VerifyBody,
        response: { 200: VerifyResponse, ...errorResponses(400, 401, 409, 429) },
      },
      preValidation: authenticated,
      preHandler: perIp('mfa-verify-ip'),
    },
    async (request, reply) => {
      const issued = await service.verifyEnrollment(authOf(request), request.body.challengeId, request.body.code, clientMeta(request));
      setDeviceCookie(reply, issued);
      return { success: true, mfaEnabled: true, device: presentDevice(issued.device) };
    },
  );

  app.post(
    '/api/auth/login/mfa',
    {
      schema: {
        tags: ['auth', 'mfa'],
        summary: 'Second step of an MFA login: the e-mailed code',
        description:
          'Exchanges the challengeId returned by POST /api/auth/login (mfaRequired) and the e-mailed code for a token pair. With rememberDevice ' +
          '(default true) the browser becomes a trusted device for 7 days (trusted-device cookie) and later logins with the password alone skip the code. ' +
          `A refused code is a 401 UNAUTHENTICATED and issues nothing. ${CODE_RULES} ${ipLimit}`,
        body: LoginMfaBody,
        response: { 200: TokenPairSchema, ...errorResponses(400, 401, 403, 429) },
      },
      preHandler: perIp('login-mfa-ip'),
    },
    async (request, reply) => {
      const { challengeId, code, rememberDevice } = request.body;
      const { tokens, issued } = await service.completeLogin(challengeId, code, rememberDevice ?? true, clientMeta(request));
      if (issued) setDeviceCookie(reply, issued);
      return tokens;
    },
  );

  app.get(
    '/api/user/me/trusted-devices',
    {
      schema: {
        tags: ['mfa'],
        summary: 'The caller\'s active trusted devices',
        description: 'Not revoked and not expired, most recently used first. Each backs a 7-day MFA-skip cookie.',
        security: SECURED,
        response: { 200: DevicesResponse, ...errorResponses(401) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, devices: (await service.listDevices(authOf(request))).map(presentDevice) }),
  );

  app.delete(
    '/api/user/me/trusted-devices/:id',
    {
      schema: {
        tags: ['mfa'],
        summary: 'Revoke a trusted device',
        description: 'Its browser has to enter a code again at its next login. 404 when the caller has no such active device (also for another user\'s device).',
        security: SECURED,
        params: DeviceParams,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => {
      await service.revokeDevice(authOf(request), request.params.id);
      return { success: true, message: 'Trusted device revoked' };
    },
  );

  // The outbox shows codes: it exists only when DEV_OUTBOX=true, never in production (config refuses
  // that combination), and only superadmins read it. Elsewhere the route is simply not found.
  if (config.devOutbox && config.nodeEnv !== 'production') {
    app.get(
      '/api/dev/outbox',
      {
        schema: {
          tags: ['dev'],
          summary: 'Development mail outbox (DEV_OUTBOX=true only; superadmins)',
          description:
            'Messages kept when SMTP_URL is not set, latest first, so that codes can be read during development. Registered only when ' +
            'DEV_OUTBOX=true and NODE_ENV is not production (404 otherwise); needs a superadmin (401 without a token, 403 for anyone else).',
          security: SECURED,
          querystring: OutboxQuery,
          response: { 200: OutboxResponse, ...errorResponses(400, 401, 403) },
        },
        preValidation: authenticated,
      },
      async (request) => {
        assertOutboxReader(authOf(request));
        const rows = await listOutboxMessages(ctx.db, { to: request.query.to, limit: request.query.limit ?? 50 });
        return { success: true, messages: rows.map(presentOutboxMessage) };
      },
    );
  }
}
