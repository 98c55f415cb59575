import { Type } from '@fastify/type-provider-typebox';
import { DateTime, Id, Nullable } from '../../shared/schemas.js';

const Code = Type.String({ pattern: '^[0-9]{6}$', description: 'The 6-digit code from the e-mail' });
const ChallengeId = Id('challengeId returned with the e-mailed code');

/** The spec's Trusted device, exactly these fields. */
export const TrustedDeviceSchema = Type.Object({
  id: Type.String({ description: 'Id of the trusted-device record (used to revoke it)' }),
  deviceId: Type.String({ description: 'Identifier of the browser; kept when the same browser is trusted again' }),
  sourceIp: Type.String({ description: 'IP address the device was trusted from' }),
  ua: Type.String({ description: 'User-agent text of the browser' }),
  createdAt: DateTime(),
  lastUsedAt: DateTime('Last time it let a login skip the code'),
  expiresAt: DateTime('7 days after createdAt'),
});

export const EnrollResponse = Type.Object({
  success: Type.Boolean(),
  challengeId: Type.String(),
  maskedEmail: Type.String({ description: 'The address partly replaced by asterisks, e.g. j***@example.com' }),
});

export const VerifyBody = Type.Object({ challengeId: ChallengeId, code: Code });

export const VerifyResponse = Type.Object({
  success: Type.Boolean(),
  mfaEnabled: Type.Boolean(),
  device: TrustedDeviceSchema,
});

export const LoginMfaBody = Type.Object({
  challengeId: ChallengeId,
  code: Code,
  rememberDevice: Type.Optional(Type.Boolean({ default: true, description: 'Trust this browser for 7 days (sets the trusted-device cookie); default true' })),
});

export const DevicesResponse = Type.Object({ success: Type.Boolean(), devices: Type.Array(TrustedDeviceSchema) });

export const DeviceParams = Type.Object({ id: Id('Trusted device id') });

export const OutboxQuery = Type.Object({
  to: Type.Optional(Type.String({ minLength: 1, maxLength: 254, description: 'Only messages to this address (case-insensitive)' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50, description: 'Latest N messages' })),
});

export const OutboxResponse = Type.Object({
  success: Type.Boolean(),
  messages: Type.Array(
    Type.Object({
      id: Type.String(),
      to: Type.String(),
      subject: Type.String(),
      text: Type.String(),
      html: Nullable(Type.String()),
      created: DateTime(),
    }),
  ),
});
