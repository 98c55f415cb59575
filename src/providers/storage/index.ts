import { join } from 'node:path';
import type { AppConfig } from '../../config.js';
import { LocalBlobStorage } from './local.js';
import type { BlobStorage } from './types.js';

export type { BlobStorage, StoredBlob } from './types.js';
export { BLOB_LIST_PAGE_MAX, BlobNotFoundError } from './types.js';
export { LocalBlobStorage } from './local.js';

/** The configured blob storage: the local folder `${DATA_DIR}/files` (the only implementation so far). */
export function createBlobStorage(config: Pick<AppConfig, 'dataDir'>): BlobStorage {
  return new LocalBlobStorage(join(config.dataDir, 'files'));
}

/**
 * Storage key of an upload: sharded by the random tail of its id (UUIDv7 starts with the time, so the
 * head would put a whole day in one folder): `uploads/ab/cd/<id>`.
 */
export function uploadKey(uploadId: string): string {
  const tail = uploadId.replace(/[^A-Za-z0-9]/g, '').toLowerCase();
  const a = tail.slice(-2).padStart(2, '0');
  const b = tail.slice(-4, -2).padStart(2, '0');
  return `uploads/${a}/${b}/${uploadId}`;
}
