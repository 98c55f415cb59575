import type { AppContext } from '../../context.js';
import { decryptSecret, encryptSecret } from '../../shared/crypto.js';
import { dateTimeField } from '../../shared/date-time-field.js';
import { badField, notFound } from '../../shared/errors.js';
import type { AuthContext } from '../identity/auth-context.js';
import { findInstitution } from '../tenancy/tenancy.repository.js';
import { assertManageCloud } from './cloud.policy.js';
import * as repo from './cloud.repository.js';
import { revokeAtProvider, type RevokeOutcome } from './cloud.revoke.js';
import type { StoreCloudProviderInput } from './cloud.schemas.js';

export class CloudService {
  constructor(private readonly ctx: AppContext) {}

  private async loadInstitution(auth: AuthContext, id: string) {
    const institution = await findInstitution(this.ctx.db, id);
    if (!institution) throw notFound('Institution');
    assertManageCloud(auth, institution);
    return institution;
  }

  async store(auth: AuthContext, institutionId: string, input: StoreCloudProviderInput) {
    const institution = await this.loadInstitution(auth, institutionId);
    const known = Object.keys(this.ctx.config.cloudRevokeUrls);
    if (!known.includes(input.provider)) throw badField('provider', `provider must be one of ${known.join(', ')} (CLOUD_REVOKE_URLS)`);
    const key = this.ctx.config.encryptionKey;
    const now = this.ctx.clock.now();
    const expiresAt = input.expiresAt ? dateTimeField('expiresAt', input.expiresAt).toISOString() : undefined;
    const entry: repo.StoredCloudProvider = {
      provider: input.provider,
      accessToken: encryptSecret(key, input.accessToken),
      ...(input.refreshToken ? { refreshToken: encryptSecret(key, input.refreshToken) } : {}),
      ...(expiresAt ? { expiresAt } : {}),
      connectedAt: now.toISOString(),
      connectedBy: auth.userId,
    };
    if (!(await repo.storeCloudProvider(this.ctx.db, institution.id, entry, now))) throw notFound('Institution');
    return { provider: input.provider, connected: true, expiresAt: expiresAt ?? null };
  }

  /**
   * Removes the stored token first (atomically), then asks the provider to revoke it, best effort with
   * a timeout: whatever the provider does, the local token is gone and the answer is a 200.
   */
  async revoke(auth: AuthContext, institutionId: string): Promise<string> {
    const institution = await this.loadInstitution(auth, institutionId);
    const stored = await repo.takeCloudProvider(this.ctx.db, institution.id, this.ctx.clock.now());
    if (stored === undefined) throw notFound('Institution');
    if (stored === null) return 'No cloud-services token was stored; nothing to revoke';
    const outcome = await this.revokeRemotely(stored);
    if (!outcome.ok) this.ctx.log.warn({ institutionId: institution.id, provider: stored.provider, status: outcome.status, reason: outcome.reason }, 'cloud provider revoke failed');
    return `Cloud-services token removed. Provider revoke: ${outcome.ok ? 'done' : outcome.attempted ? 'failed' : 'not attempted'} (${outcome.reason})`;
  }

  private async revokeRemotely(stored: repo.StoredCloudProvider): Promise<RevokeOutcome> {
    const url = this.ctx.config.cloudRevokeUrls[stored.provider];
    if (!url) return { attempted: false, ok: false, status: 0, reason: `no revoke URL is configured for ${stored.provider}` };
    let tokens: string[];
    try {
      tokens = [stored.accessToken, ...(stored.refreshToken ? [stored.refreshToken] : [])].map((t) => decryptSecret(this.ctx.config.encryptionKey, t));
    } catch {
      return { attempted: false, ok: false, status: 0, reason: 'the stored token could not be decrypted with the current ENCRYPTION_KEY' };
    }
    // The access and refresh tokens are revoked together; the first failure (if any) is reported.
    const outcomes = await Promise.all(tokens.map((t) => revokeAtProvider(url, t)));
    return outcomes.find((o) => !o.ok) ?? outcomes[0]!;
  }
}
