import { eq, sql } from 'drizzle-orm';
import type { DbOrTx } from '../../db/client.js';
import { rowsOf } from '../../db/client.js';
import { institutions } from '../../db/schema.js';

/** The stored entry under cloudServices.cloudprovider; tokens are sealed (AES-256-GCM). */
export interface StoredCloudProvider {
  provider: string;
  accessToken: string;
  refreshToken?: string;
  expiresAt?: string;
  connectedAt: string;
  connectedBy: string;
}

export const CLOUD_FIELD = 'cloudprovider';

/** Sets cloudServices.cloudprovider in one statement (other keys of cloudServices stay). */
export async function storeCloudProvider(db: DbOrTx, institutionId: string, entry: StoredCloudProvider, now: Date): Promise<boolean> {
  const rows = await db
    .update(institutions)
    .set({
      cloudServices: sql`jsonb_set(${institutions.cloudServices}, ${`{${CLOUD_FIELD}}`}::text[], ${JSON.stringify(entry)}::jsonb, true)`,
      updatedAt: now,
    })
    .where(eq(institutions.id, institutionId))
    .returning({ id: institutions.id });
  return rows.length > 0;
}

/**
 * Removes cloudServices.cloudprovider and returns what it held, in one statement: two concurrent
 * revokes cannot both get the token, and nothing is lost between reading and removing it.
 * `null`: nothing was stored; `undefined`: no such institution.
 */
export async function takeCloudProvider(db: DbOrTx, institutionId: string, now: Date): Promise<StoredCloudProvider | null | undefined> {
  const rows = await rowsOf<{ old: StoredCloudProvider | string | null }>(
    db,
    sql`update institutions i
           set cloud_services = i.cloud_services - ${CLOUD_FIELD}, updated_at = ${now.toISOString()}::timestamptz
          from (select id, cloud_services -> ${CLOUD_FIELD} as old from institutions where id = ${institutionId} for update) o
         where i.id = o.id
     returning o.old`,
  );
  if (rows.length === 0) return undefined;
  const old = rows[0]!.old;
  if (old === null || old === undefined) return null;
  return typeof old === 'string' ? (JSON.parse(old) as StoredCloudProvider) : old;
}
