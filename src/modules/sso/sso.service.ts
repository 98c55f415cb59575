import type { AppContext } from '../../context.js';
import { decryptSecret, encryptSecret } from '../../shared/crypto.js';
import { badField, notFound } from '../../shared/errors.js';
import { isUuid, newId } from '../../shared/ids.js';
import { envelope, pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import { findAccount } from '../tenancy/tenancy.repository.js';
import { accountForNewProvider, assertManage, assertTest, listableAccountIds } from './sso.policy.js';
import { probe, refuseUrl } from './sso.net.js';
import * as repo from './sso.repository.js';
import type { CreateSsoProviderInput, PatchSsoProviderInput } from './sso.schemas.js';

export const SSO_TEST_TIMEOUT_MS = 5000;

export function presentProvider(p: repo.SsoProviderRow) {
  return {
    _id: p.id,
    account: p.accountId,
    name: p.name,
    type: p.type,
    issuer: p.issuer,
    tokenEndpoint: p.tokenEndpoint,
    clientId: p.clientId,
    hasClientSecret: p.clientSecretSealed !== null,
    created: p.createdAt.toISOString(),
    updated: p.updatedAt.toISOString(),
  };
}

export class SsoService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /** A provider URL: absolute, https (http only while SSO_TEST_ALLOW_PRIVATE), no credentials, no refused literal address. */
  private checkUrl(field: string, value: string): string {
    let url: URL;
    try {
      url = new URL(value.trim());
    } catch {
      throw badField(field, `${field} must be an absolute URL`);
    }
    const refusal = refuseUrl(url, this.ctx.config.ssoTestAllowPrivate);
    if (refusal) throw badField(field, `${field}: ${refusal}`);
    return url.toString();
  }

  private async load(id: string) {
    const row = await repo.findProvider(this.db, id);
    if (!row) throw notFound('SSO provider');
    return row;
  }

  async create(auth: AuthContext, input: CreateSsoProviderInput) {
    const accountId = accountForNewProvider(auth, input.account);
    if (!(await findAccount(this.db, accountId))) throw notFound('Account');
    const name = input.name.trim();
    if (!name) throw badField('name', 'name must not be blank');
    if (!input.clientId.trim()) throw badField('clientId', 'clientId must not be blank');
    const now = this.ctx.clock.now();
    const row = await repo.insertProvider(this.db, {
      id: newId(),
      accountId,
      name,
      type: input.type,
      issuer: this.checkUrl('issuer', input.issuer),
      tokenEndpoint: this.checkUrl('tokenEndpoint', input.tokenEndpoint),
      clientId: input.clientId.trim(),
      clientSecretSealed: input.clientSecret ? encryptSecret(this.ctx.config.encryptionKey, input.clientSecret) : null,
      createdBy: auth.userId,
      createdAt: now,
      updatedAt: now,
    });
    return presentProvider(row);
  }

  async get(auth: AuthContext, id: string) {
    const row = await this.load(id);
    assertTest(auth, row.accountId);
    return presentProvider(row);
  }

  async list(auth: AuthContext, query: { page?: number; pageSize?: number; account?: string }) {
    const scope = listableAccountIds(auth);
    const filter = query.account?.split(/\s+/).filter(Boolean);
    if (filter?.some((id) => !isUuid(id))) throw badField('account', 'account must be account ids separated by spaces');
    const { page, pageSize, limit, offset } = pageWindow(query);
    const { rows, total } = await repo.listProviders(this.db, scope, filter && filter.length > 0 ? filter : undefined, { limit, offset });
    return envelope(rows.map(presentProvider), total, page, pageSize);
  }

  async update(auth: AuthContext, id: string, input: PatchSsoProviderInput) {
    const row = await this.load(id);
    assertManage(auth, row.accountId);
    const patch: Partial<repo.SsoProviderRow> = {};
    if (input.name !== undefined) {
      patch.name = input.name.trim();
      if (!patch.name) throw badField('name', 'name must not be blank');
    }
    if (input.type !== undefined) patch.type = input.type;
    if (input.issuer !== undefined) patch.issuer = this.checkUrl('issuer', input.issuer);
    if (input.tokenEndpoint !== undefined) patch.tokenEndpoint = this.checkUrl('tokenEndpoint', input.tokenEndpoint);
    if (input.clientId !== undefined) {
      patch.clientId = input.clientId.trim();
      if (!patch.clientId) throw badField('clientId', 'clientId must not be blank');
    }
    if (input.clientSecret !== undefined) patch.clientSecretSealed = input.clientSecret === null ? null : encryptSecret(this.ctx.config.encryptionKey, input.clientSecret);
    // The stored secret is sent (HTTP Basic) to tokenEndpoint by the test: it does not follow the endpoint to
    // another origin unless whoever moves it gives the secret again (or removes it). Otherwise anyone allowed to
    // edit the provider could have a secret someone else entered sent to a host of their choosing.
    else if (patch.tokenEndpoint !== undefined && row.clientSecretSealed && new URL(patch.tokenEndpoint).origin !== new URL(row.tokenEndpoint).origin) {
      throw badField('clientSecret', 'tokenEndpoint moves to another origin: give clientSecret again (or null to remove it), the stored one is not sent there');
    }
    const updated = Object.keys(patch).length > 0 ? await repo.updateProvider(this.db, row.id, patch, this.ctx.clock.now()) : row;
    if (!updated) throw notFound('SSO provider');
    return presentProvider(updated);
  }

  async remove(auth: AuthContext, id: string): Promise<void> {
    const row = await this.load(id);
    assertManage(auth, row.accountId);
    if (!(await repo.deleteProvider(this.db, row.id))) throw notFound('SSO provider');
  }

  /**
   * Posts a client-credentials token request (client id and secret as HTTP Basic) to the token
   * endpoint and reports what came back. Any HTTP answer means reachable; 400/401 are the usual
   * answers of a live endpoint to a client it will not serve, so only 404 and 5xx count as failure.
   */
  async test(auth: AuthContext, id: string) {
    const row = await this.load(id);
    assertTest(auth, row.accountId);
    let secret = '';
    if (row.clientSecretSealed) {
      try {
        secret = decryptSecret(this.ctx.config.encryptionKey, row.clientSecretSealed);
      } catch {
        return { success: false, reachable: false, status: 0, message: 'The stored client secret cannot be decrypted with the current ENCRYPTION_KEY; set it again' };
      }
    }
    const result = await probe(row.tokenEndpoint, {
      allowPrivate: this.ctx.config.ssoTestAllowPrivate,
      timeoutMs: SSO_TEST_TIMEOUT_MS,
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        accept: 'application/json',
        authorization: `Basic ${Buffer.from(`${encodeURIComponent(row.clientId)}:${encodeURIComponent(secret)}`).toString('base64')}`,
      },
      body: new URLSearchParams({ grant_type: 'client_credentials' }).toString(),
    });
    const success = result.reachable && !result.blocked && result.status !== 404 && result.status < 500;
    return { success, reachable: result.reachable, status: result.status, message: result.message };
  }
}
