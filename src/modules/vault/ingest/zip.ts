/**
 * Bounds for zip containers (DOCX) before any library inflates them.
 *
 * A DOCX is a zip; mammoth (through JSZip) inflates every part it reads with no limit, so a 764 KB
 * file whose word/document.xml inflates to 250 MB used to take the whole process down. Here, before
 * mammoth sees the bytes:
 * 1. the central directory is read (no inflation): entry count, encryption, method, and the DECLARED
 *    sizes against the total and ratio limits — most bombs are refused here at no cost;
 * 2. every entry is then inflated with a hard output cap (zlib's maxOutputLength), so an entry whose
 *    declared size lies is stopped as soon as it passes the remaining budget or its ratio limit, and
 *    an actual size that differs from the declared one is refused (the archive is corrupt or crafted);
 * 3. XML parts must not carry a DTD: OOXML never uses one (ECMA-376 Part 2 forbids DTDs in packages),
 *    and a DTD is how entity expansion ("billion laughs") starts.
 * Only when all of this passes does mammoth inflate the same, now measured, entries again.
 */
import { inflateRawSync } from 'node:zlib';

export interface ZipLimits {
  /** Sum of the inflated sizes of all entries. */
  maxInflatedBytes: number;
  /** Inflated size / compressed size of one entry (entries inflating to at most RATIO_FREE_BYTES are exempt). */
  maxCompressionRatio: number;
  maxEntries: number;
}

/** Small entries may compress very well (a run of spaces, an empty table); the ratio limit starts above this. */
export const RATIO_FREE_BYTES = 1024 * 1024;

/** A container refused by the bounds; the message is fit for the uploader. */
export class ZipLimitError extends Error {
  override name = 'ZipLimitError';
}

interface Entry {
  name: string;
  method: number;
  flags: number;
  compressedSize: number;
  uncompressedSize: number;
  localOffset: number;
}

const EOCD_SIG = 0x06054b50;
const CEN_SIG = 0x02014b50;
const LOC_SIG = 0x04034b50;
const MB = (n: number) => `${Math.round((n / (1024 * 1024)) * 10) / 10} MB`;

function findEndOfCentralDirectory(buf: Buffer): number {
  const min = Math.max(0, buf.length - (22 + 0xffff));
  for (let i = buf.length - 22; i >= min; i--) {
    if (buf.readUInt32LE(i) === EOCD_SIG) return i;
  }
  return -1;
}

/** The central directory's entries; throws ZipLimitError for anything that is not a plain, bounded zip. */
export function readCentralDirectory(buf: Buffer, limits: ZipLimits): Entry[] {
  if (buf.length < 22) throw new ZipLimitError('The file is not a valid zip container (too short)');
  const eocd = findEndOfCentralDirectory(buf);
  if (eocd < 0) throw new ZipLimitError('The file is not a valid zip container (no central directory: truncated or corrupt)');
  const total = buf.readUInt16LE(eocd + 10);
  const cdSize = buf.readUInt32LE(eocd + 12);
  const cdOffset = buf.readUInt32LE(eocd + 16);
  if (total === 0xffff || cdSize === 0xffffffff || cdOffset === 0xffffffff) throw new ZipLimitError('ZIP64 containers are not supported');
  if (buf.readUInt16LE(eocd + 4) !== 0 || buf.readUInt16LE(eocd + 6) !== 0) throw new ZipLimitError('Multi-part zip containers are not supported');
  if (total > limits.maxEntries) throw new ZipLimitError(`The container has ${total} entries; at most ${limits.maxEntries} are accepted`);
  if (cdOffset + cdSize > eocd) throw new ZipLimitError('The zip central directory points outside the file (truncated or corrupt)');

  const entries: Entry[] = [];
  let declaredTotal = 0;
  let p = cdOffset;
  for (let i = 0; i < total; i++) {
    if (p + 46 > eocd || buf.readUInt32LE(p) !== CEN_SIG) throw new ZipLimitError('The zip central directory is corrupt');
    const nameLength = buf.readUInt16LE(p + 28);
    const entry: Entry = {
      flags: buf.readUInt16LE(p + 8),
      method: buf.readUInt16LE(p + 10),
      compressedSize: buf.readUInt32LE(p + 20),
      uncompressedSize: buf.readUInt32LE(p + 24),
      localOffset: buf.readUInt32LE(p + 42),
      name: buf.toString('utf8', p + 46, Math.min(eocd, p + 46 + nameLength)),
    };
    p += 46 + nameLength + buf.readUInt16LE(p + 30) + buf.readUInt16LE(p + 32);
    if (entry.compressedSize === 0xffffffff || entry.uncompressedSize === 0xffffffff || entry.localOffset === 0xffffffff) {
      throw new ZipLimitError('ZIP64 containers are not supported');
    }
    if (entry.flags & 0x1) throw new ZipLimitError('Encrypted (password-protected) documents cannot be read');
    if (entry.method !== 0 && entry.method !== 8) throw new ZipLimitError(`Unsupported compression method ${entry.method} in "${entry.name}"`);
    declaredTotal += entry.uncompressedSize;
    if (declaredTotal > limits.maxInflatedBytes) {
      throw new ZipLimitError(`The document would inflate to more than ${MB(limits.maxInflatedBytes)} (declared sizes); it was not opened`);
    }
    checkRatio(entry.name, entry.uncompressedSize, entry.compressedSize, limits);
    entries.push(entry);
  }
  return entries;
}

function checkRatio(name: string, inflated: number, compressed: number, limits: ZipLimits): void {
  if (inflated <= RATIO_FREE_BYTES) return;
  if (inflated > compressed * limits.maxCompressionRatio) {
    throw new ZipLimitError(
      `"${name}" inflates more than ${limits.maxCompressionRatio} times its compressed size (a zip bomb?); the document was not opened`,
    );
  }
}

const DTD_MARKERS = ['<!DOCTYPE', '<!ENTITY'].flatMap((m) => [Buffer.from(m, 'utf8'), Buffer.from(m, 'utf16le')]);

/**
 * Checks a zip container against the limits, inflating each entry under a hard cap (see the file
 * comment). Returns the measured inflated total.
 */
export function checkZipContainer(buf: Buffer, limits: ZipLimits): { entries: number; inflatedBytes: number } {
  const entries = readCentralDirectory(buf, limits);
  let inflatedTotal = 0;
  for (const e of entries) {
    const p = e.localOffset;
    if (p + 30 > buf.length || buf.readUInt32LE(p) !== LOC_SIG) throw new ZipLimitError(`The zip entry "${e.name}" is missing (truncated or corrupt file)`);
    const start = p + 30 + buf.readUInt16LE(p + 26) + buf.readUInt16LE(p + 28);
    const end = start + e.compressedSize;
    if (end > buf.length) throw new ZipLimitError(`The zip entry "${e.name}" is cut off (truncated file)`);
    const data = buf.subarray(start, end);
    const remaining = limits.maxInflatedBytes - inflatedTotal;
    let inflated: Buffer;
    if (e.method === 0) {
      inflated = data;
    } else {
      const ratioCap = Math.max(RATIO_FREE_BYTES, e.compressedSize * limits.maxCompressionRatio);
      const cap = Math.min(remaining, ratioCap);
      try {
        // +1: reaching the cap exactly is allowed, passing it is not
        inflated = inflateRawSync(data, { maxOutputLength: Math.max(1, cap + 1) });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' || err instanceof RangeError) {
          if (cap === remaining) throw new ZipLimitError(`The document inflates to more than ${MB(limits.maxInflatedBytes)}; it was not opened`);
          throw new ZipLimitError(`"${e.name}" inflates more than ${limits.maxCompressionRatio} times its compressed size (a zip bomb?); the document was not opened`);
        }
        throw new ZipLimitError(`The zip entry "${e.name}" is corrupt: ${(err as Error).message}`);
      }
      if (inflated.length > cap) {
        if (cap === remaining) throw new ZipLimitError(`The document inflates to more than ${MB(limits.maxInflatedBytes)}; it was not opened`);
        throw new ZipLimitError(`"${e.name}" inflates more than ${limits.maxCompressionRatio} times its compressed size (a zip bomb?); the document was not opened`);
      }
    }
    if (inflated.length !== e.uncompressedSize) {
      throw new ZipLimitError(`The zip entry "${e.name}" declares ${e.uncompressedSize} bytes but holds ${inflated.length}: a corrupt or crafted file`);
    }
    inflatedTotal += inflated.length;
    if (/\.(xml|rels|vml)$/i.test(e.name) && DTD_MARKERS.some((m) => inflated.includes(m))) {
      throw new ZipLimitError(`"${e.name}" declares a DTD or entities, which documents never need (entity expansion is refused)`);
    }
  }
  return { entries: entries.length, inflatedBytes: inflatedTotal };
}
