import { Type, type Static } from '@fastify/type-provider-typebox';
import { Id, ListEnvelope, PageFields } from '../../shared/schemas.js';

const Url = (description: string) => Type.String({ minLength: 1, maxLength: 2048, description });

export const SsoType = Type.Enum(['oidc', 'oauth2'], { description: 'oidc | oauth2' });

export const SsoProviderSchema = Type.Object({
  _id: Type.String(),
  account: Type.String(),
  name: Type.String(),
  type: Type.String({ description: 'oidc | oauth2' }),
  issuer: Type.String(),
  tokenEndpoint: Type.String(),
  clientId: Type.String(),
  hasClientSecret: Type.Boolean({ description: 'A client secret is stored (encrypted; never returned)' }),
  created: Type.String({ format: 'date-time' }),
  updated: Type.String({ format: 'date-time' }),
});

export const CreateSsoProviderBody = Type.Object({
  account: Type.Optional(Id('Owning account (default: your home account)')),
  name: Type.String({ minLength: 1, maxLength: 200 }),
  type: SsoType,
  issuer: Url('Issuer URL: https: (http: only with SSO_TEST_ALLOW_PRIVATE=true)'),
  tokenEndpoint: Url('Token endpoint URL: https: (http: only with SSO_TEST_ALLOW_PRIVATE=true)'),
  clientId: Type.String({ minLength: 1, maxLength: 500 }),
  clientSecret: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, description: 'Stored encrypted (AES-256-GCM); never returned' })),
});
export type CreateSsoProviderInput = Static<typeof CreateSsoProviderBody>;

export const PatchSsoProviderBody = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  type: Type.Optional(SsoType),
  issuer: Type.Optional(Url('Issuer URL')),
  tokenEndpoint: Type.Optional(Url('Token endpoint URL')),
  clientId: Type.Optional(Type.String({ minLength: 1, maxLength: 500 })),
  clientSecret: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 4096 }), Type.Null()], { description: 'New secret; null removes it' })),
});
export type PatchSsoProviderInput = Static<typeof PatchSsoProviderBody>;

export const SsoProviderResponse = Type.Object({ success: Type.Boolean(), data: SsoProviderSchema });
export const SsoProvidersQuery = Type.Object({ ...PageFields, account: Type.Optional(Type.String({ maxLength: 1000, description: 'Account id, or several separated by spaces' })) });
export const SsoProvidersListResponse = ListEnvelope(SsoProviderSchema);

export const SsoTestResponse = Type.Object({
  success: Type.Boolean({ description: 'true when the endpoint was reached and answered neither 404 nor 5xx' }),
  reachable: Type.Boolean({ description: 'An HTTP answer was received' }),
  status: Type.Integer({ description: 'HTTP status seen (after redirects); 0 when none' }),
  message: Type.String(),
});
