import type { MemoryWithInstitution } from './memory.repository.js';

export function presentMemoryInstitution(row: Pick<MemoryWithInstitution, 'shared' | 'institutionId' | 'institutionName' | 'institutionAiname' | 'institutionPicture'>) {
  if (!row.shared || !row.institutionId) return { _id: '', name: '', ainame: '', picture: '', personal: true };
  return { _id: row.institutionId, name: row.institutionName ?? '', ainame: row.institutionAiname ?? '', picture: row.institutionPicture ?? '' };
}

export function presentMemory(row: MemoryWithInstitution, access: { editable: boolean; isAuthor: boolean }) {
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
    editable: access.editable,
    isAuthor: access.isAuthor,
  };
}
