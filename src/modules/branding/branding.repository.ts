import { asc, eq, sql } from 'drizzle-orm';
import type { Db, DbOrTx } from '../../db/client.js';
import { accounts, institutions } from '../../db/schema.js';

export type InstitutionRow = typeof institutions.$inferSelect;

const brandingColumns = {
  id: institutions.id,
  picture: institutions.picture,
  pictureAnimated: institutions.pictureAnimated,
  pictureBg: institutions.pictureBg,
  pictureDarkBg: institutions.pictureDarkBg,
  voiceAgentId: institutions.voiceAgentId,
  about: institutions.about,
  ainame: institutions.ainame,
  // the twin's status (active or inactive): a twin of an inactive account is inactive, as sign-in treats it
  status: sql<string>`case when ${institutions.status} = 'active' and ${accounts.status} = 'active' then 'active' else 'inactive' end`,
};
export type BrandingRow = { [K in keyof typeof brandingColumns]: string };

const prepared = new WeakMap<Db, ReturnType<typeof buildBrandingQuery>>();
function buildBrandingQuery(db: Db) {
  return db
    .select(brandingColumns)
    .from(institutions)
    .innerJoin(accounts, eq(accounts.id, institutions.accountId))
    .where(eq(institutions.publicId, sql`${sql.placeholder('publicId')}::uuid`))
    .limit(1)
    .prepare('branding_by_public_id');
}

/** The branding columns of the institution with this publicId (a lower-case UUID). */
export async function findBranding(db: Db, publicId: string): Promise<BrandingRow | undefined> {
  let q = prepared.get(db);
  if (!q) prepared.set(db, (q = buildBrandingQuery(db)));
  const [row] = await q.execute({ publicId });
  return row;
}

/** Institutions whose ltiContextIds hold this context id exactly (GIN index on the array). */
export async function findByContextId(db: DbOrTx, ltiContextId: string): Promise<InstitutionRow[]> {
  return db
    .select()
    .from(institutions)
    .where(sql`${institutions.ltiContextIds} @> array[${ltiContextId}]::text[]`)
    .orderBy(asc(institutions.name), asc(institutions.id))
    .limit(100);
}
