import { createReadStream, createWriteStream, type Dir } from 'node:fs';
import { link, lstat, mkdir, opendir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomBytes } from 'node:crypto';
import { BLOB_LIST_PAGE_MAX, BlobNotFoundError, type BlobStorage, type StoredBlob } from './types.js';

const KEY_RE = /^[A-Za-z0-9_-]+(?:\/[A-Za-z0-9_.-]+)*$/;
/** A key this storage accepts (and a folder on the way to one): safe segments, none of them `.` or `..`. */
const isKey = (key: string) => KEY_RE.test(key) && !key.split('/').some((s) => s === '.' || s === '..');
/** The temporary file of a put of `path` (renamed to `path` once written), and how a listing tells one. */
const partialPath = (path: string) => `${path}.${randomBytes(6).toString('hex')}.tmp`;
const PARTIAL_RE = /\.[0-9a-f]{12}\.tmp$/;
/** Files whose size and time a listing asks for at once. */
const STAT_CONCURRENCY = 16;

/**
 * Blobs as files under one root folder. Writes go to a temporary file renamed into place, so a crash
 * mid-upload never leaves a truncated object under a real key.
 */
export class LocalBlobStorage implements BlobStorage {
  readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
  }

  /** Keys are relative paths of safe segments; anything that could leave the root is refused. */
  private pathOf(key: string): string {
    if (!isKey(key)) throw new Error(`Invalid storage key: ${key}`);
    const path = join(this.root, ...key.split('/'));
    if (!path.startsWith(this.root + sep)) throw new Error(`Invalid storage key: ${key}`);
    return path;
  }

  async put(key: string, source: Readable | Buffer): Promise<{ size: number }> {
    const path = this.pathOf(key);
    await mkdir(dirname(path), { recursive: true });
    const tmp = partialPath(path);
    let size = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        done(null, chunk);
      },
    });
    try {
      await pipeline(Buffer.isBuffer(source) ? Readable.from([source]) : source, counter, createWriteStream(tmp, { flags: 'wx' }));
      await rename(tmp, path);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    return { size };
  }

  /**
   * The bytes are written to a temporary file first, then hard-linked to the key: link(2) fails with EEXIST when
   * the key exists, so of two racing calls one links (rename would replace the other's object).
   */
  async putIfAbsent(key: string, bytes: Buffer): Promise<boolean> {
    const path = this.pathOf(key);
    await mkdir(dirname(path), { recursive: true });
    const tmp = partialPath(path);
    try {
      await writeFile(tmp, bytes, { flag: 'wx' });
      // only the link's EEXIST says the key is taken (the temporary file's name is new)
      return await link(tmp, path).then(
        () => true,
        (err: NodeJS.ErrnoException) => {
          if (err.code === 'EEXIST') return false;
          throw err;
        },
      );
    } finally {
      await rm(tmp, { force: true });
    }
  }

  async get(key: string): Promise<Readable> {
    const path = this.pathOf(key);
    try {
      await stat(path);
    } catch {
      throw new BlobNotFoundError(key);
    }
    return createReadStream(path);
  }

  async getBuffer(key: string): Promise<Buffer> {
    try {
      return await readFile(this.pathOf(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobNotFoundError(key);
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.pathOf(key), { force: true });
  }

  /**
   * The files under the root, folder by folder through opendir (a folder's entries are read a few at a time,
   * never as one array: a folder may hold very many), with their size and mtime. What is not a key of this
   * storage (a name with other characters, a symbolic link, `lost+found`) is not listed, nor looked into.
   * Temporary files of puts are listed as `partial`.
   */
  async *list(options: { pageSize?: number } = {}): AsyncGenerator<StoredBlob[]> {
    const pageSize = Math.max(1, Math.min(BLOB_LIST_PAGE_MAX, Math.floor(options.pageSize ?? BLOB_LIST_PAGE_MAX)));
    let keys: string[] = [];
    for await (const key of this.keysUnder('')) {
      keys.push(key);
      if (keys.length < pageSize) continue;
      const page = await this.described(keys);
      keys = [];
      if (page.length > 0) yield page;
    }
    const last = await this.described(keys);
    if (last.length > 0) yield last;
  }

  /** Keys of the files below the folder `prefix` ('' = the root), depth first; a folder that is not there holds none. */
  private async *keysUnder(prefix: string): AsyncGenerator<string> {
    let dir: Dir;
    try {
      dir = await opendir(prefix ? join(this.root, ...prefix.split('/')) : this.root);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return; // no upload yet, or removed meanwhile
      throw err;
    }
    // for await closes the folder at its end, and when the listing is given up half-way (return or throw)
    for await (const entry of dir) {
      const key = prefix ? `${prefix}/${entry.name}` : entry.name;
      if (!isKey(key)) continue;
      if (entry.isDirectory()) yield* this.keysUnder(key);
      else if (entry.isFile()) yield key;
    }
  }

  /** The listing entries of these keys; a file gone meanwhile (deleted, or a put's temporary file renamed) is left out. */
  private async described(keys: readonly string[]): Promise<StoredBlob[]> {
    const out: StoredBlob[] = [];
    for (let i = 0; i < keys.length; i += STAT_CONCURRENCY) {
      const stats = await Promise.all(
        keys.slice(i, i + STAT_CONCURRENCY).map((key) =>
          lstat(this.pathOf(key)).then(
            (s) => (s.isFile() ? { key, size: s.size, modifiedAt: s.mtime, partial: PARTIAL_RE.test(key) } : undefined),
            (err: NodeJS.ErrnoException) => {
              if (err.code === 'ENOENT') return undefined;
              throw err;
            },
          ),
        ),
      );
      for (const s of stats) if (s) out.push(s);
    }
    return out;
  }
}
