/**
 * Rows of the memory module (rest engineer, issue 10). Targets: shared memory rows of A1 written by
 * `w.targetUser` (read by A1's members, changed by their author and A1's admins), the member's personal
 * rows (its author only), and the admin routes over `w.targetUser` and A1. Administrative roles do not
 * widen what one reads on the user routes: an admin enrolled nowhere gets 404 there and uses the admin
 * routes. A plain user is 403 on every /api/admin/* route.
 */
import assert from 'node:assert/strict';
import { insertMemory } from '../../src/modules/memory/memory.repository.js';
import { newId } from '../../src/shared/ids.js';
import { authed, CANARY_A1, ownRecords, type Expect, type Row, type World } from './fixture.js';

const makeMemory = async (w: World, fields: { authorUserId: string; shared: boolean; institutionId?: string | null }) =>
  insertMemory(w.database.db, {
    id: newId(),
    authorUserId: fields.authorUserId,
    institutionId: fields.shared ? (fields.institutionId ?? w.a1.id) : null,
    keyName: `key ${CANARY_A1}`,
    keyValue: `value ${CANARY_A1}`,
    keyNamespace: 'matrix',
    shared: fields.shared,
  });

/** One shared row of A1 by the target user and one personal row of the member, made once per world. */
const fixed = new WeakMap<World, Promise<{ sharedA1: { id: string }; personal: { id: string } }>>();
const records = (w: World) => {
  let p = fixed.get(w);
  if (!p) {
    p = (async () => ({
      sharedA1: await makeMemory(w, { authorUserId: w.targetUser.id, shared: true }),
      personal: await makeMemory(w, { authorUserId: w.users.member.id, shared: false }),
    }))();
    fixed.set(w, p);
  }
  return p;
};

/** A shared row of A1 that the member did not write. */
// the admins of A1 change it, enrolled in it or not (contract §7: "the author and that institution's admins")
const sharedA1: Expect = authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: 403, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 200 });
const personalOfMember: Expect = authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: 200, institutionAdmin: 404, accountAdmin: 404, otherAccountAdmin: 404, superadmin: 404 });
/** Admin routes over A1 and its members. */
const adminOverA1: Expect = authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 403, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 200 });

export const rows: Row[] = [
  {
    route: 'GET /api/user/memory',
    expect: ownRecords(200),
    request: async ({ w }) => {
      await records(w);
      return {};
    },
    check: async (res, { w, principal }) => {
      const ids = (res.json().data as Array<{ _id: string }>).map((r) => r._id);
      const { sharedA1: s, personal } = await records(w);
      assert.equal(ids.includes(s.id), principal === 'member' || principal === 'institutionAdmin');
      assert.equal(ids.includes(personal.id), principal === 'member');
    },
  },
  {
    route: 'POST /api/user/memory',
    expect: ownRecords(201),
    request: ({ principal }) => ({ payload: { key_name: `personal of ${principal}`, key_value: 'v' } }),
  },
  {
    route: 'POST /api/user/memory',
    variant: 'shared in A1',
    expect: authed({ otherAccountUser: 403, otherInstitutionMember: 403, member: 201, institutionAdmin: 201, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 403 }),
    request: ({ w, principal }) => ({ payload: { key_name: `shared by ${principal}`, key_value: 'v', shared: true, institution: w.a1.id } }),
  },
  {
    route: 'PUT /api/user/memory/:id',
    variant: 'shared row of A1',
    expect: sharedA1,
    request: async ({ w, expected, principal }) => ({
      params: { id: expected === 200 ? (await makeMemory(w, { authorUserId: w.targetUser.id, shared: true })).id : (await records(w)).sharedA1.id },
      payload: { key_value: `set by ${principal}` },
    }),
  },
  {
    route: 'PUT /api/user/memory/:id',
    variant: "member's personal row",
    expect: personalOfMember,
    request: async ({ w, principal }) => ({ params: { id: (await records(w)).personal.id }, payload: { key_description: `set by ${principal}` } }),
  },
  {
    route: 'DELETE /api/user/memory/:id',
    variant: 'shared row of A1',
    expect: sharedA1,
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await makeMemory(w, { authorUserId: w.targetUser.id, shared: true })).id : (await records(w)).sharedA1.id } }),
  },
  {
    route: 'DELETE /api/user/memory/:id',
    variant: "member's personal row",
    expect: personalOfMember,
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await makeMemory(w, { authorUserId: w.users.member.id, shared: false })).id : (await records(w)).personal.id } }),
  },
  {
    route: 'GET /api/admin/memory/user/:userId',
    expect: adminOverA1,
    request: async ({ w }) => {
      await records(w);
      return { params: { userId: w.targetUser.id } };
    },
    check: async (res, { w }) => {
      const groups = res.json().data as Array<{ institution: { _id: string }; items: Array<{ _id: string }> }>;
      assert.ok(groups.some((g) => g.institution._id === w.a1.id && g.items.some((i) => i._id !== undefined)));
    },
  },
  {
    route: 'GET /api/admin/memory/institution/:instId',
    expect: adminOverA1,
    request: async ({ w }) => {
      await records(w);
      return { params: { instId: w.a1.id } };
    },
  },
  {
    // Successes delete a fresh row of a fresh member of A1; refusals aim at the target user's row.
    route: 'DELETE /api/admin/memory/user/:userId',
    expect: adminOverA1,
    request: async ({ w, expected }) => {
      if (expected === 200) {
        const user = await w.makeUser(w.accountA.id, { [w.a1.id]: 'user' });
        const row = await makeMemory(w, { authorUserId: user.id, shared: true });
        return { params: { userId: user.id }, payload: { ids: [row.id] } };
      }
      return { params: { userId: w.targetUser.id }, payload: { ids: [(await records(w)).sharedA1.id] } };
    },
    check: (res) => assert.equal(res.json().deletedCount, 1),
  },
  {
    route: 'DELETE /api/admin/memory/institution/:instId',
    expect: adminOverA1,
    request: async ({ w, expected }) => ({
      params: { instId: w.a1.id },
      payload: { ids: [expected === 200 ? (await makeMemory(w, { authorUserId: w.targetUser.id, shared: true })).id : (await records(w)).sharedA1.id] },
    }),
    check: (res) => assert.equal(res.json().deletedCount, 1),
  },
];
