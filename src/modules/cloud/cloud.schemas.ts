import { Type, type Static } from '@fastify/type-provider-typebox';
import { Id } from '../../shared/schemas.js';

export const InstitutionIdParams = Type.Object({ institutionId: Id('Institution id') });

export const StoreCloudProviderBody = Type.Object({
  provider: Type.String({ minLength: 1, maxLength: 64, description: 'A provider with a revoke URL in CLOUD_REVOKE_URLS (google, microsoft, dropbox by default)' }),
  accessToken: Type.String({ minLength: 1, maxLength: 8192, description: 'Stored encrypted (AES-256-GCM); never returned' }),
  refreshToken: Type.Optional(Type.String({ minLength: 1, maxLength: 8192, description: 'Stored encrypted; never returned' })),
  expiresAt: Type.Optional(Type.String({ format: 'date-time', description: 'When the access token expires' })),
});
export type StoreCloudProviderInput = Static<typeof StoreCloudProviderBody>;

export const CloudProviderResponse = Type.Object({
  success: Type.Boolean(),
  data: Type.Object({
    provider: Type.String(),
    connected: Type.Boolean({ description: 'A token is stored' }),
    expiresAt: Type.Union([Type.String(), Type.Null()]),
  }),
  message: Type.String(),
});

export const RevokeResponse = Type.Object({ success: Type.Boolean(), message: Type.String() });
