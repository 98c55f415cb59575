/**
 * Rows of the settings module (rest engineer, issue 10). Settings live in an institution: created in
 * the caller's current institution (none for admins enrolled nowhere: 403), listed per institution,
 * changed by admins of the institution (institution admin, account admin, superadmin) and by their
 * creator. Target: a setting of A1 created by `w.targetUser` with editable_others false.
 */
import { insertSettingUnlessDuplicate } from '../../src/modules/settings/settings.repository.js';
import { newId } from '../../src/shared/ids.js';
import { authed, CANARY_A1, type Expect, type Row, type World } from './fixture.js';

const makeSetting = async (w: World) => {
  const row = await insertSettingUnlessDuplicate(w.database.db, { id: newId(), institutionId: w.a1.id, userId: w.targetUser.id, key: `key ${newId()} ${CANARY_A1}`, value: CANARY_A1 });
  return row!;
};
const fixed = new WeakMap<World, Promise<{ id: string }>>();
const settingA1 = (w: World) => {
  let p = fixed.get(w);
  if (!p) fixed.set(w, (p = makeSetting(w)));
  return p;
};

/** Routes of the caller's current institution: everyone enrolled somewhere; admins enrolled nowhere have none (403). */
const currentInstitution = (ok: number): Expect =>
  authed({ otherAccountUser: ok, otherInstitutionMember: ok, member: ok, institutionAdmin: ok, accountAdmin: 403, otherAccountAdmin: 403, superadmin: 403 });
const changeA1: Expect = authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: 403, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 200 });

export const rows: Row[] = [
  {
    route: 'POST /api/user/setting',
    expect: currentInstitution(200),
    request: ({ principal }) => ({ payload: { key: `${principal} ${newId()}`, value: 'v' } }),
  },
  {
    route: 'GET /api/user/settings',
    expect: currentInstitution(200),
    request: async ({ w }) => {
      await settingA1(w);
      return {};
    },
  },
  {
    route: 'GET /api/user/settings',
    variant: 'institution A1',
    expect: authed({ otherAccountUser: 404, otherInstitutionMember: 404, member: 200, institutionAdmin: 200, accountAdmin: 200, otherAccountAdmin: 404, superadmin: 200 }),
    request: async ({ w }) => {
      await settingA1(w);
      return { query: { institution: w.a1.id } };
    },
  },
  {
    route: 'PUT /api/user/setting/:id',
    expect: changeA1,
    request: async ({ w, principal }) => ({ params: { id: (await settingA1(w)).id }, payload: { value: `set by ${principal}` } }),
  },
  {
    route: 'DELETE /api/user/setting/:id',
    expect: changeA1,
    request: async ({ w, expected }) => ({ params: { id: expected === 200 ? (await makeSetting(w)).id : (await settingA1(w)).id } }),
  },
];
