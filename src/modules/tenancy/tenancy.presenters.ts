import { presentUser } from '../identity/identity.presenters.js';
import type { AccountRow, InstitutionRow, InstitutionsUsageRow, UserMembershipRow, UserRow } from './tenancy.repository.js';

/** credits + creditsUsed, to the ten-thousandth credits are kept in (no binary-float tail such as 0.30000000000000004). */
export const creditsTotal = (credits: number, creditsUsed: number): number => Math.round((credits + creditsUsed) * 10_000) / 10_000;

/** creditsUsed / (credits + creditsUsed) × 100, two decimals; 0 when nothing was ever granted. */
export function usagePct(credits: number, creditsUsed: number): number {
  const total = credits + creditsUsed;
  if (total <= 0) return 0;
  return Math.round((creditsUsed / total) * 100 * 100) / 100;
}

export function presentAccount(a: AccountRow) {
  return {
    _id: a.id,
    name: a.name,
    managerEmail: a.managerEmail,
    status: a.status,
    lastActivityAt: a.lastActivityAt ? a.lastActivityAt.toISOString() : null,
    created: a.createdAt.toISOString(),
    updated: a.updatedAt.toISOString(),
  };
}

export function presentInstitutionsUsage(u: InstitutionsUsageRow | undefined) {
  const credits = u?.credits ?? 0;
  const creditsUsed = u?.creditsUsed ?? 0;
  return { count: u?.count ?? 0, credits, creditsUsed, creditsTotal: creditsTotal(credits, creditsUsed), creditsUsagePct: usagePct(credits, creditsUsed) };
}

/** Cloud services without their secrets: only whether a token is stored, for which provider, until when. */
export function presentCloudServices(raw: Record<string, unknown> | null | undefined) {
  const out: Record<string, { provider: string; connected: boolean; expiresAt: string | null }> = {};
  for (const [key, value] of Object.entries(raw ?? {})) {
    if (!value || typeof value !== 'object') continue;
    const entry = value as Record<string, unknown>;
    const expires = entry.expiresAt;
    out[key] = {
      provider: typeof entry.provider === 'string' ? entry.provider : key,
      connected: Boolean(entry.accessToken),
      expiresAt: typeof expires === 'string' ? expires : typeof expires === 'number' ? new Date(expires).toISOString() : null,
    };
  }
  return out;
}

/** The spec's Institution, field names spelled as the spec spells them, plus admin fields. */
export function presentInstitution(i: InstitutionRow) {
  const credits = Number(i.credits);
  const creditsUsed = Number(i.creditsUsed);
  return {
    _id: i.id,
    id: i.id,
    account: i.accountId,
    name: i.name,
    ainame: i.ainame,
    about: i.about,
    picture: i.picture,
    picture_bg: i.pictureBg,
    picture_dark_bg: i.pictureDarkBg,
    picture_animated: i.pictureAnimated,
    voice_agent_id: i.voiceAgentId,
    credits,
    creditsUsed,
    creditAward: Number(i.creditAward),
    creditsTotal: creditsTotal(credits, creditsUsed),
    creditsUsagePct: usagePct(credits, creditsUsed),
    maxCompletionTokens: i.maxCompletionTokens,
    maxFiles: i.maxFiles,
    status: i.status as 'active' | 'inactive', // only ever written through the validated schema
    allowJoining: i.allowJoining,
    questionType: i.questionType,
    rtVoice: i.rtVoice,
    joiningAdminOnly: i.joiningAdminOnly,
    poolCredits: i.poolCredits,
    disableFileUploadForUser: i.disableFileUploadForUser,
    personalisationAsked: i.personalisationAsked,
    locationEnabled: i.locationEnabled,
    rtEnabled: i.rtEnabled,
    rtAdminOnly: i.rtAdminOnly,
    displayAgentDetails: i.displayAgentDetails,
    disableAssistantsForUser: i.disableAssistantsForUser,
    publicId: i.publicId,
    publicAuthorizedUrls: i.publicAuthorizedUrls,
    invoices_urls: i.invoicesUrls,
    toolsDisabled: i.toolsDisabled,
    ltiContextIds: i.ltiContextIds,
    assistantsDisabled: i.assistantsDisabled,
    contactEmail: i.contactEmail,
    summaryModel: i.summaryModel,
    conversationModel: i.conversationModel,
    cloudServices: presentCloudServices(i.cloudServices),
    created: i.createdAt.toISOString(),
    updated: i.updatedAt.toISOString(),
  };
}

/**
 * presentUser (never the password hash) with, of the user's home account, current institution and enrolments,
 * only those the caller may see: the caller filters them (tenancy.policy), `account` and `institution` are null otherwise.
 */
export function presentAdminUser(u: UserRow, memberships: readonly UserMembershipRow[], account: string | null, institution: string | null) {
  return { ...presentUser(u), account, institution, memberships: memberships.map((m) => ({ institution: m.institutionId, role: m.role })) };
}
