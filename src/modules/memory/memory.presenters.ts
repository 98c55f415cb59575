import type { MemoryWithInstitution } from './memory.repository.js';

export function presentMemoryInstitution(row: Pick<MemoryWithInstitution, 'shared' | 'institutionId' | 'institutionName' | 'institutionAiname' | 'institutionPicture'>) {
  if (!row.shared || !row.institutionId) return { _id: '', name: '', ainame: '', picture: '', personal: true };
  return { _id: row.institutionId, name: row.institutionName ?? '', ainame: row.institutionAiname ?? '', picture: row.institutionPicture ?? '' };
}

/**
 * The part of a row's presentation that does not depend on the caller, made once per row object: rows
 * come from the memory cache and are the same objects request after request, and formatting their two
 * dates was the largest cost of GET /api/user/memory (a tenth of the main thread, bench/RESULTS.md).
 */
const presentedRows = new WeakMap<MemoryWithInstitution, ReturnType<typeof presentRow>>();

function presentRow(row: MemoryWithInstitution) {
  return {
    _id: row.id,
    key_name: row.keyName,
    key_value: row.keyValue,
    key_description: row.keyDescription,
    key_namespace: row.keyNamespace,
    shared: row.shared,
    created: row.createdAt.toISOString(),
    updated: row.updatedAt.toISOString(),
    institution: presentMemoryInstitution(row),
  };
}

export function presentMemory(row: MemoryWithInstitution, access: { editable: boolean; isAuthor: boolean }) {
  let base = presentedRows.get(row);
  if (!base) presentedRows.set(row, (base = presentRow(row)));
  // a literal with every field (not a spread): one object shape, which the serializer reads fastest
  return {
    _id: base._id,
    key_name: base.key_name,
    key_value: base.key_value,
    key_description: base.key_description,
    key_namespace: base.key_namespace,
    shared: base.shared,
    created: base.created,
    updated: base.updated,
    institution: base.institution,
    editable: access.editable,
    isAuthor: access.isAuthor,
  };
}

/**
 * GET /api/user/memory sends pre-serialized JSON: once presentation was memoized, the remaining cost
 * of the route was serializing the same rows through the response schema on every request (and
 * allocating one object per row to do it). The JSON of a row is made once per row object and caller
 * point of view (the 4 combinations of editable and isAuthor), lazily.
 *
 * JSON.stringify of presentMemory's literal gives exactly what the schema serializer of MemoryParam
 * writes: the literal's keys are in schema order, every field is a string or a boolean, and
 * `personal` is present only for personal rows (test/memory.test.ts compares the two byte for byte).
 */
const rowJson = new WeakMap<MemoryWithInstitution, Array<string | undefined>>();

export function presentMemoryJson(row: MemoryWithInstitution, access: { editable: boolean; isAuthor: boolean }): string {
  let variants = rowJson.get(row);
  if (!variants) rowJson.set(row, (variants = [undefined, undefined, undefined, undefined]));
  const i = (access.editable ? 2 : 0) + (access.isAuthor ? 1 : 0);
  return (variants[i] ??= JSON.stringify(presentMemory(row, access)));
}
