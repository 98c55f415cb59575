import { v4 as uuidv4, v7 as uuidv7 } from 'uuid';

/** Record ids: UUIDv7, sortable by creation time and index friendly. */
export const newId = (): string => uuidv7();
/** Public identifiers (institution publicId): random UUID v4. */
export const newPublicId = (): string => uuidv4();

/** What an id looks like: a lower-case UUID (the route schemas use the same pattern). */
export const UUID_PATTERN = '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
const UUID_RE = new RegExp(UUID_PATTERN);
export const isUuid = (value: unknown): value is string => typeof value === 'string' && UUID_RE.test(value);
