import type { AppContext } from '../../context.js';
import type { AuthContext } from '../identity/auth-context.js';
import { presentInstitution } from '../tenancy/tenancy.presenters.js';
import { BrandingCache, etagOf, type BrandingEntry } from './branding.cache.js';
import { seesFullInstitution } from './branding.policy.js';
import * as repo from './branding.repository.js';
import { PRIVATE_INSTITUTION_FIELDS } from './branding.schemas.js';

/** The spec's Branding object, in the spec's field order. */
export function presentBranding(r: repo.BrandingRow) {
  return {
    picture: r.picture,
    picture_animated: r.pictureAnimated,
    picture_bg: r.pictureBg,
    picture_dark_bg: r.pictureDarkBg,
    voice_agent_id: r.voiceAgentId,
    about: r.about,
    ainame: r.ainame,
    status: r.status,
  };
}

const SPEC_FIELDS = [
  '_id', 'id', 'name', 'ainame', 'picture', 'picture_bg', 'picture_dark_bg', 'picture_animated', 'voice_agent_id',
  'credits', 'creditAward', 'creditsTotal', 'creditsUsagePct', 'maxCompletionTokens', 'maxFiles',
  'status', 'allowJoining', 'questionType', 'rtVoice',
  'joiningAdminOnly', 'poolCredits', 'disableFileUploadForUser', 'personalisationAsked', 'locationEnabled', 'rtEnabled', 'rtAdminOnly', 'displayAgentDetails', 'disableAssistantsForUser',
  'publicId', 'publicAuthorizedUrls', 'invoices_urls', 'toolsDisabled', 'ltiContextIds', 'assistantsDisabled', 'contactEmail',
] as const;

/** The spec's Institution table: the full record, or without the private fields. */
export function presentContextInstitution(row: repo.InstitutionRow, full: boolean): Record<string, unknown> {
  const all = presentInstitution(row) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const f of SPEC_FIELDS) if (full || !PRIVATE_INSTITUTION_FIELDS.includes(f)) out[f] = all[f];
  return out;
}

export class BrandingService {
  readonly cache: BrandingCache;

  constructor(private readonly ctx: AppContext) {
    this.cache = new BrandingCache(ctx.invalidation, ctx.clock);
  }

  /** Branding by publicId (lower-cased UUID), served from the cache. */
  branding(publicId: string): BrandingEntry | Promise<BrandingEntry> {
    return this.cache.peek(publicId) ?? this.cache.get(publicId, () => this.load(publicId));
  }

  private async load(publicId: string): Promise<BrandingEntry> {
    const row = await repo.findBranding(this.ctx.db, publicId);
    if (!row) return { found: false };
    const body = Buffer.from(JSON.stringify(presentBranding(row)));
    return { found: true, institutionId: row.id, body, etag: etagOf(body) };
  }

  async institutionsForContext(auth: AuthContext | null, ltiContextId: string) {
    const rows = await repo.findByContextId(this.ctx.db, ltiContextId);
    return rows.map((r) => presentContextInstitution(r, seesFullInstitution(auth, r)));
  }
}
