import { v4 as uuidv4, v7 as uuidv7 } from 'uuid';

/** Record ids: UUIDv7, sortable by creation time and index friendly. */
export const newId = (): string => uuidv7();
/** Public identifiers (institution publicId): random UUID v4. */
export const newPublicId = (): string => uuidv4();

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
export const isUuid = (value: unknown): value is string => typeof value === 'string' && UUID_RE.test(value);
