import type { Readable } from 'node:stream';

/** One stored object as a listing sees it. */
export interface StoredBlob {
  key: string;
  size: number;
  /** When its bytes were last written (the local folder: the file's mtime; an object store: its LastModified). */
  modifiedAt: Date;
  /** The unfinished write of a put (the local folder's temporary file, in flight or left by a crash); `delete` takes its key like any other. */
  partial: boolean;
}

/** The most entries one page of `list` holds (an object store's listing page: S3's ListObjectsV2 returns up to 1,000). */
export const BLOB_LIST_PAGE_MAX = 1000;

/**
 * Where the original bytes of uploads live, addressed by an opaque key. Implementations: the local
 * folder (default, `${DATA_DIR}/files`); an object store would implement the same methods.
 * With several nodes, every node must reach the same storage (a shared volume or an object store),
 * because the node that ingests a file is not necessarily the one that received it.
 */
export interface BlobStorage {
  /** Stores the stream under the key, atomically: a reader never sees a partial object. Returns the byte count. */
  put(key: string, source: Readable | Buffer): Promise<{ size: number }>;
  /**
   * Stores the bytes under the key unless an object is stored there already: true when they were stored, false
   * when the key was taken (what is stored there stays). Atomic as put is, and exclusive: of calls racing for one
   * free key, exactly one stores.
   */
  putIfAbsent(key: string, bytes: Buffer): Promise<boolean>;
  /** A stream of the stored bytes; rejects with BlobNotFoundError when the key is unknown. */
  get(key: string): Promise<Readable>;
  /** All bytes at once (ingestion needs the whole file for extraction). */
  getBuffer(key: string): Promise<Buffer>;
  /** Removes the object; a missing key is not an error. */
  delete(key: string): Promise<void>;
  /**
   * Every stored object, in pages of at most `pageSize` entries (default and bound BLOB_LIST_PAGE_MAX), in no
   * particular order, read as the pages are taken (never the whole listing at once). Objects written or removed
   * while it runs may or may not be listed; one removed between its listing and its page is left out.
   */
  list(options?: { pageSize?: number }): AsyncIterable<StoredBlob[]>;
}

export class BlobNotFoundError extends Error {
  constructor(readonly key: string) {
    super(`Stored file ${key} not found`);
    this.name = 'BlobNotFoundError';
  }
}
