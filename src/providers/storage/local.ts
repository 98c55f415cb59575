import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomBytes } from 'node:crypto';
import { BlobNotFoundError, type BlobStorage } from './types.js';

const KEY_RE = /^[A-Za-z0-9_-]+(?:\/[A-Za-z0-9_.-]+)*$/;

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
    if (!KEY_RE.test(key) || key.split('/').some((s) => s === '.' || s === '..')) throw new Error(`Invalid storage key: ${key}`);
    const path = join(this.root, ...key.split('/'));
    if (!path.startsWith(this.root + sep)) throw new Error(`Invalid storage key: ${key}`);
    return path;
  }

  async put(key: string, source: Readable | Buffer): Promise<{ size: number }> {
    const path = this.pathOf(key);
    await mkdir(dirname(path), { recursive: true });
    const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
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
}
