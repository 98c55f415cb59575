/** The sharing flags of an institution's shared records (assistants, settings), as a request names them. */
export interface SharingRequest {
  institution_shared?: boolean;
  editable_others?: boolean;
}

/**
 * Whether a request changes who sees (institution_shared) or who edits (editable_others) a record: asking for
 * the values it already has changes nothing. The policies decide who may (conversation.policy, settings.policy).
 */
export function changesSharing(asked: SharingRequest, current: { institutionShared: boolean; editableOthers: boolean }): boolean {
  return (asked.institution_shared !== undefined && asked.institution_shared !== current.institutionShared) || (asked.editable_others !== undefined && asked.editable_others !== current.editableOthers);
}
