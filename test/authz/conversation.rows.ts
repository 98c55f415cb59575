/**
 * Rows of the conversation module: the three Q&A endpoints, histories, assistants and the admin
 * feedbacks/assistants listings. Targets: A1 (asked in by its publicId; funded here), an
 * institution-shared assistant of A1 owned by the member, and a history record of the member in A1
 * with a thumb. Asking in an institution needs an enrolment (403 otherwise, the publicId being
 * public); an assistant one may not see is 404; admins of A1 (institution admin, account admin of A,
 * superadmin) see and change every assistant of A1; history records are their asker's only (404).
 */
import { sql } from 'drizzle-orm';
import { histories } from '../../src/db/schema.js';
import { insertAssistant } from '../../src/modules/conversation/assistants.repository.js';
import { newId } from '../../src/shared/ids.js';
import { authed, CANARY_A1, ownRecords, type Expect, type Row, type World } from './fixture.js';

/** Who may ask in A1: its members. */
const askInA1: Expect = authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 200, institutionAdmin: 200, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 403 });
/** An institution-shared assistant of A1: its members and A1's admins. */
const seeAssistant = (ok: number): Expect =>
  authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: ok, institutionAdmin: ok, accountAdmin: ok, otherAccountAdmin: 404, superadmin: ok });
/** Admin listings: plain users 403; every admin gets its own scope. */
const adminListing: Expect = authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 200, superadmin: 200 });

const targets = new WeakMap<World, { assistantId: string; historyId: string }>();

/** A1 funded, the member's shared assistant and a history record with feedback (made once per world). */
async function target(w: World) {
  let t = targets.get(w);
  if (t) return t;
  await w.database.db.execute(sql`update institutions set credits = 100000 where id = ${w.a1.id}`);
  const assistantId = await makeAssistant(w);
  const historyId = newId();
  await w.database.db.insert(histories).values({
    id: historyId,
    userId: w.users.member.id,
    accountId: w.accountA.id,
    institutionId: w.a1.id,
    input: `question ${CANARY_A1}`,
    inputs: [`question ${CANARY_A1}`],
    outputs: [`answer ${CANARY_A1}`],
    success: true,
    thumbUpDown: 'down',
    feedback: `feedback ${CANARY_A1}`,
  });
  targets.set(w, (t = { assistantId, historyId }));
  return t;
}

async function makeAssistant(w: World): Promise<string> {
  const row = await insertAssistant(w.database.db, {
    id: newId(),
    accountId: w.accountA.id,
    institutionId: w.a1.id,
    ownerUserId: w.users.member.id,
    name: `Tutor ${CANARY_A1}`,
    instructions: `Instructions ${CANARY_A1}`,
    institutionShared: true,
  });
  return row.id;
}

const qanda = (route: string): Row => ({
  route: `POST ${route}`,
  variant: 'in A1 by publicId',
  expect: askInA1,
  request: async ({ w }) => {
    await target(w);
    return { payload: { id: 1, inputs: ['What is in the file?'], outputs: [], requestArgs: { institutionPublicId: w.a1.publicId } } };
  },
});

export const rows: Row[] = [
  qanda('/api/ai/personal/qanda'),
  qanda('/api/ai/experimental/personal/qanda'),
  qanda('/api/ai/experimental/personal/qanda-v2'),
  {
    route: 'POST /api/ai/personal/qanda',
    variant: 'with the member’s shared assistant',
    expect: askInA1,
    request: async ({ w }) => ({ payload: { inputs: ['hello'], requestArgs: { institutionPublicId: w.a1.publicId, assistantId: (await target(w)).assistantId } } }),
  },

  // ───────────── histories ─────────────
  {
    // Only one's own records, whoever asks: the leak check proves the member's records reach nobody else.
    route: 'POST /api/user/histories',
    expect: ownRecords(200),
    request: async ({ w }) => {
      await target(w);
      return { payload: { allInstitutions: true } };
    },
  },
  {
    route: 'PATCH /api/user/history/:id',
    expect: authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: 200, institutionAdmin: 404, accountAdmin: 404, otherAccountAdmin: 404, superadmin: 404 }),
    request: async ({ w, principal }) => ({ params: { id: (await target(w)).historyId }, payload: { favorite: principal === 'member' } }),
  },

  // ───────────── assistants ─────────────
  {
    route: 'POST /api/user/assistant',
    variant: 'in A1',
    expect: authed({ otherAccountUser: 404, otherInstitutionMember: 403, member: 201, institutionAdmin: 201, accountAdmin: 201, otherAccountAdmin: 404, superadmin: 201 }),
    request: ({ w }) => ({ payload: { name: 'Matrix assistant', institution: w.a1.id } }),
  },
  {
    route: 'POST /api/user/assistant',
    variant: 'personal',
    expect: ownRecords(201),
    request: () => ({ payload: { name: 'Personal matrix assistant', institution: null } }),
  },
  {
    route: 'GET /api/user/assistants',
    expect: ownRecords(200),
    request: async ({ w }) => {
      await target(w);
      return {};
    },
  },
  {
    route: 'GET /api/user/assistants',
    variant: 'of A1',
    expect: seeAssistant(200),
    request: async ({ w }) => {
      await target(w);
      return { query: { institution: w.a1.id } };
    },
  },
  { route: 'GET /api/user/assistant/:id', expect: seeAssistant(200), request: async ({ w }) => ({ params: { id: (await target(w)).assistantId } }) },
  {
    route: 'PATCH /api/user/assistant/:id',
    expect: seeAssistant(200),
    request: async ({ w, principal }) => ({ params: { id: (await target(w)).assistantId }, payload: { description: `set by ${principal}` } }),
  },
  {
    route: 'DELETE /api/user/assistant/:id',
    expect: seeAssistant(200),
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? await makeAssistant(w) : (await target(w)).assistantId } }),
  },
  {
    route: 'POST /api/user/assistant/:id/like',
    expect: seeAssistant(200),
    request: async ({ w }) => ({ params: { id: (await target(w)).assistantId }, payload: {} }),
  },

  // ───────────── admin listings ─────────────
  {
    route: 'POST /api/admin/feedbacks',
    expect: adminListing,
    request: async ({ w }) => {
      await target(w);
      return { payload: {} };
    },
  },
  {
    route: 'POST /api/admin/assistants',
    expect: adminListing,
    request: async ({ w }) => {
      await target(w);
      return { payload: {} };
    },
  },
];
