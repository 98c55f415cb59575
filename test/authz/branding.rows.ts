/**
 * Rows of the branding module (rest engineer, issue 10): the context lookup (public projection without
 * a token, full record for members and admins of each institution; a presented token must be valid)
 * and the public branding lookup (no authentication: any token, good or bad, changes nothing).
 */
import assert from 'node:assert/strict';
import { eq, sql } from 'drizzle-orm';
import { institutions } from '../../src/db/schema.js';
import { everyone, type Row, type World } from './fixture.js';

const CONTEXT = 'https://lms.matrix.test/course/a1';
const mapped = new WeakSet<World>();
const mapContext = async (w: World) => {
  if (mapped.has(w)) return;
  await w.database.db.update(institutions).set({ ltiContextIds: sql`array[${CONTEXT}]::text[]` }).where(eq(institutions.id, w.a1.id));
  mapped.add(w);
};

export const rows: Row[] = [
  {
    route: 'POST /api/auth/getInstitutionsForContextid',
    expect: { ...everyone(200), garbage: 401, expired: 401, revoked: 401 },
    // The public projection (name, AI name, pictures, switches) of an institution mapped to an LTI
    // context is public by the spec; credits, invoices, contact e-mail and limits are checked below.
    noLeakCheck: 'the public projection of a mapped institution (its name) is public by the spec',
    request: async ({ w }) => {
      await mapContext(w);
      return { payload: { ltiContextId: CONTEXT } };
    },
    check: (res, { principal }) => {
      const [inst] = res.json().institutions as Array<Record<string, unknown>>;
      assert.ok(inst, 'A1 is found');
      const full = principal === 'member' || principal === 'institutionAdmin' || principal === 'accountAdmin' || principal === 'superadmin';
      for (const f of ['credits', 'invoices_urls', 'contactEmail', 'maxFiles', 'maxCompletionTokens']) assert.equal(f in inst, full, `${f} for ${principal}`);
    },
  },
  {
    route: 'POST /api/agent/branding',
    expect: everyone(200),
    request: ({ w }) => ({ payload: { publicId: w.a1.publicId } }),
    check: (res) => assert.deepEqual(Object.keys(res.json()).sort(), ['about', 'ainame', 'picture', 'picture_animated', 'picture_bg', 'picture_dark_bg', 'status', 'voice_agent_id']),
  },
];
