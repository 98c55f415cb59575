/**
 * Rows of the cloud module (rest engineer, issue 10): storing and revoking an institution's
 * cloud-services token need institutions.edit on it (A1's admin, A's account admin, superadmin); a plain
 * user is refused by the permission gate before any lookup (403). No cell reaches a provider: the
 * revoke cells find no token stored (the row clears it first), so nothing is posted anywhere.
 */
import { eq, sql } from 'drizzle-orm';
import { institutions } from '../../src/db/schema.js';
import { authed, type Expect, type Row, type World } from './fixture.js';

const onA1: Expect = authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 200 });

const clearToken = (w: World) => w.database.db.update(institutions).set({ cloudServices: sql`'{}'::jsonb` }).where(eq(institutions.id, w.a1.id));

export const rows: Row[] = [
  {
    route: 'PUT /api/admin/institution/:id/cloudprovider',
    expect: onA1,
    request: ({ w, principal }) => ({ params: { id: w.a1.id }, payload: { provider: 'google', accessToken: `token of ${principal}` } }),
  },
  {
    route: 'DELETE /api/auth/cloudprovider/institution/:institutionId/revoke',
    expect: onA1,
    request: async ({ w }) => {
      await clearToken(w);
      return { params: { institutionId: w.a1.id } };
    },
  },
];
