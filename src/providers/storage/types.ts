import type { Readable } from 'node:stream';

/**
 * Where the original bytes of uploads live, addressed by an opaque key. Implementations: the local
 * folder (default, `${DATA_DIR}/files`); an object store would implement the same four methods.
 * With several nodes, every node must reach the same storage (a shared volume or an object store),
 * because the node that ingests a file is not necessarily the one that received it.
 */
export interface BlobStorage {
  /** Stores the stream under the key, atomically: a reader never sees a partial object. Returns the byte count. */
  put(key: string, source: Readable | Buffer): Promise<{ size: number }>;
  /** A stream of the stored bytes; rejects with BlobNotFoundError when the key is unknown. */
  get(key: string): Promise<Readable>;
  /** All bytes at once (ingestion needs the whole file for extraction). */
  getBuffer(key: string): Promise<Buffer>;
  /** Removes the object; a missing key is not an error. */
  delete(key: string): Promise<void>;
}

export class BlobNotFoundError extends Error {
  constructor(readonly key: string) {
    super(`Stored file ${key} not found`);
    this.name = 'BlobNotFoundError';
  }
}
