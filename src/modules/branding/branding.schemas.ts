import { Type } from '@fastify/type-provider-typebox';

/** Any UUID spelling (upper or lower case); it is compared lower-cased. */
export const PUBLIC_ID_PATTERN = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';

export const BrandingBody = Type.Object({
  publicId: Type.String({ pattern: PUBLIC_ID_PATTERN, description: 'publicId (UUID) of the digital twin' }),
});

export const BrandingSchema = Type.Object({
  picture: Type.String({ description: 'Avatar URL' }),
  picture_animated: Type.String({ description: 'Animated avatar URL; may be empty' }),
  picture_bg: Type.String({ description: 'Light-mode background URL' }),
  picture_dark_bg: Type.String({ description: 'Dark-mode background URL; may be empty' }),
  voice_agent_id: Type.String({ description: 'Voice agent identifier' }),
  about: Type.String({ description: "Description of the agent's purpose" }),
  ainame: Type.String({ description: 'Display name' }),
  status: Type.String({ description: 'active | inactive: inactive when the institution or its account is inactive (sign-in treats both alike)' }),
});

export const ContextLookupBody = Type.Object({
  ltiContextId: Type.String({ minLength: 1, maxLength: 2048, description: 'LTI context id (a context URL), matched exactly against ltiContextIds' }),
});

const S = Type.String();
const B = Type.Boolean();
const N = Type.Number();
const Strings = Type.Array(Type.String());

/** Fields everyone may see. */
const publicFields = {
  _id: S,
  id: S,
  name: S,
  ainame: S,
  picture: S,
  picture_bg: S,
  picture_dark_bg: S,
  picture_animated: S,
  voice_agent_id: S,
  status: S,
  allowJoining: S,
  questionType: S,
  rtVoice: S,
  joiningAdminOnly: B,
  poolCredits: B,
  disableFileUploadForUser: B,
  personalisationAsked: B,
  locationEnabled: B,
  rtEnabled: B,
  rtAdminOnly: B,
  displayAgentDetails: B,
  disableAssistantsForUser: B,
  publicId: Type.String({ format: 'uuid' }),
  publicAuthorizedUrls: Strings,
  toolsDisabled: Strings,
  ltiContextIds: Strings,
  assistantsDisabled: Strings,
};

/** Fields only members and admins of the institution see. */
const privateFields = {
  credits: N,
  creditAward: N,
  creditsTotal: N,
  creditsUsagePct: N,
  maxCompletionTokens: N,
  maxFiles: N,
  invoices_urls: Strings,
  contactEmail: S,
};

export const PRIVATE_INSTITUTION_FIELDS = Object.keys(privateFields);

export const ContextInstitution = Type.Object(
  { ...publicFields, ...Object.fromEntries(Object.entries(privateFields).map(([k, v]) => [k, Type.Optional(v)])) },
  { description: `The spec's Institution. The public projection leaves out ${Object.keys(privateFields).join(', ')}.` },
);

export const ContextLookupResponse = Type.Object({ success: Type.Boolean(), institutions: Type.Array(ContextInstitution) });
