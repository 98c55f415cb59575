import { Type } from '@fastify/type-provider-typebox';
import { Id } from '../../shared/schemas.js';
import { UserSchema } from './identity.presenters.js';

export const LoginBody = Type.Object({
  email: Type.String({ minLength: 3, maxLength: 254, description: 'E-mail address (case-insensitive)' }),
  password: Type.String({ minLength: 1, maxLength: 1024 }),
});

export const TokenPairSchema = Type.Object({
  success: Type.Boolean(),
  accessToken: Type.String({ description: 'JWT; send as Authorization: Bearer or x-access-token' }),
  refreshToken: Type.String({ description: 'Opaque; single use, rotated by /api/auth/refresh' }),
  expiresIn: Type.Number({ description: 'Access token lifetime in seconds' }),
  user: UserSchema,
});

export const MfaRequiredSchema = Type.Object({
  success: Type.Boolean(),
  mfaRequired: Type.Literal(true),
  challengeId: Type.String(),
  maskedEmail: Type.String(),
});

export const LoginResponse = Type.Union([TokenPairSchema, MfaRequiredSchema]);

export const RefreshBody = Type.Object({ refreshToken: Type.String({ minLength: 1, maxLength: 512 }) });

export const PatchMeBody = Type.Object({
  fname: Type.Optional(Type.String({ maxLength: 100 })),
  lname: Type.Optional(Type.String({ maxLength: 100 })),
  location: Type.Optional(Type.String({ maxLength: 200 })),
  timezone: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'IANA time zone name' })),
  mfaEnabled: Type.Optional(
    Type.Boolean({ description: 'true: start MFA enrolment (pending until verified); false: cancel a pending enrolment, or turn off an enrolled MFA (needs currentPassword)' }),
  ),
  currentPassword: Type.Optional(Type.String({ maxLength: 1024 })),
  password: Type.Optional(Type.String({ minLength: 8, maxLength: 1024, description: 'New password; needs currentPassword' })),
});

export const MeResponse = Type.Object({ success: Type.Boolean(), data: UserSchema });

export const EnrolmentSchema = Type.Object({
  _id: Type.String(),
  name: Type.String(),
  ainame: Type.String(),
  picture: Type.String(),
  publicId: Type.String(),
  status: Type.String(),
  account: Type.String(),
  role: Type.String({ description: 'admin | user' }),
  current: Type.Boolean(),
});

export const SwitchBody = Type.Object({
  institution: Id('Institution id'),
  refreshToken: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: "The session's current refresh token: the pair is rotated and returned" })),
});

export const SwitchResponse = Type.Object({
  success: Type.Boolean(),
  accessToken: Type.String({ description: 'JWT for the same session, carrying the new institution' }),
  refreshToken: Type.Optional(Type.String({ description: 'Only when the request carried the current refresh token: its rotated successor' })),
  expiresIn: Type.Number({ description: 'Access token lifetime in seconds' }),
  user: UserSchema,
});
