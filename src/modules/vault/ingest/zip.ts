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
 *
 * What is checked must be what JSZip (mammoth's zip reader, 3.x) reads: it takes the last end record
 * of the file, then reads EVERY central header from the directory's offset on, whatever count the end
 * record gives, names each entry from its LOCAL header (decoded with the central flags and Info-ZIP
 * Unicode path field), resolves "." and ".." in it, and lets a later entry of the same name replace an
 * earlier one; when the directory does not end where the end record starts it shifts every offset.
 * So the whole directory is walked from its offset to the end record, and a container is refused when
 * the two could differ: a count that is not the number of headers, a gap between the directory and
 * the end record, two entries of one name, a local name that is not the central one.
 */
import { crc32, inflateRawSync } from 'node:zlib';

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
  /** The name as JSZip keys the entry (see jszipName). */
  name: string;
  /** The name's bytes in the central header (the local header must carry the same). */
  rawName: Buffer;
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

/**
 * The last end-of-central-directory signature, searched as JSZip does from the last 4 bytes back (here
 * within the comment's reach). One in the last 21 bytes, where no record fits, is refused: JSZip would
 * take it.
 */
function findEndOfCentralDirectory(buf: Buffer): number {
  const min = Math.max(0, buf.length - (22 + 0xffff));
  for (let i = buf.length - 4; i >= min; i--) {
    if (buf.readUInt32LE(i) === EOCD_SIG) {
      if (i > buf.length - 22) throw new ZipLimitError('The zip end-of-central-directory record is cut off (truncated or corrupt)');
      return i;
    }
  }
  return -1;
}

/** The extra fields of a central header as JSZip parses them (a later field of an id replaces an earlier one). */
function extraFields(buf: Buffer, start: number, end: number): Map<number, Buffer> {
  const fields = new Map<number, Buffer>();
  let p = start;
  while (p + 4 < end) {
    const id = buf.readUInt16LE(p);
    const length = buf.readUInt16LE(p + 2);
    // JSZip would read past the block (into the comment or the next header): refused
    if (p + 4 + length > end) throw new ZipLimitError('The zip central directory is corrupt (an extra field overruns its header)');
    fields.set(id, buf.subarray(p + 4, p + 4 + length));
    p += 4 + length;
  }
  return fields;
}

/** JSZip's utils.resolve: "." and empty inner segments dropped, ".." removes the segment before. */
function resolvePath(path: string): string {
  const parts = path.split('/');
  const result: string[] = [];
  parts.forEach((part, index) => {
    if (part === '.' || (part === '' && index !== 0 && index !== parts.length - 1)) return;
    if (part === '..') result.pop();
    else result.push(part);
  });
  return result.join('/');
}

/**
 * The key under which JSZip files an entry: the name (UTF-8 when flag 11 says so, else the Info-ZIP
 * Unicode path field when its version and CRC fit, else the bytes read as UTF-8), resolved, with a
 * trailing "/" for a directory.
 */
function jszipName(rawName: Buffer, flags: number, extra: Map<number, Buffer>, versionMadeBy: number, externalAttributes: number): string {
  let name = rawName.toString('utf8');
  const unicodePath = extra.get(0x7075);
  if (!(flags & 0x800) && unicodePath && unicodePath.length >= 5 && unicodePath[0] === 1 && unicodePath.readUInt32LE(1) === crc32(rawName)) {
    name = unicodePath.subarray(5).toString('utf8');
  }
  const madeBy = versionMadeBy >> 8;
  const dir = (externalAttributes & 0x10) !== 0 || name.endsWith('/') || (madeBy === 3 && ((externalAttributes >>> 16) & 0x4000) !== 0);
  const key = resolvePath(name);
  return dir && !key.endsWith('/') ? `${key}/` : key;
}

/** The central directory's entries; throws ZipLimitError for anything that is not a plain, bounded zip. */
export function readCentralDirectory(buf: Buffer, limits: ZipLimits): Entry[] {
  if (buf.length < 22) throw new ZipLimitError('The file is not a valid zip container (too short)');
  const eocd = findEndOfCentralDirectory(buf);
  if (eocd < 0) throw new ZipLimitError('The file is not a valid zip container (no central directory: truncated or corrupt)');
  const onThisDisk = buf.readUInt16LE(eocd + 8);
  const total = buf.readUInt16LE(eocd + 10);
  const cdSize = buf.readUInt32LE(eocd + 12);
  const cdOffset = buf.readUInt32LE(eocd + 16);
  const disk = buf.readUInt16LE(eocd + 4);
  const cdDisk = buf.readUInt16LE(eocd + 6);
  if ([disk, cdDisk, onThisDisk, total].includes(0xffff) || cdSize === 0xffffffff || cdOffset === 0xffffffff) throw new ZipLimitError('ZIP64 containers are not supported');
  if (disk !== 0 || cdDisk !== 0) throw new ZipLimitError('Multi-part zip containers are not supported');
  if (eocd + 22 + buf.readUInt16LE(eocd + 20) > buf.length) throw new ZipLimitError('The zip end-of-central-directory record is cut off (truncated or corrupt)');
  if (onThisDisk !== total) throw new ZipLimitError(`The zip end record counts ${total} entries in all but ${onThisDisk} on its disk: a corrupt or crafted file`);
  if (total > limits.maxEntries) throw new ZipLimitError(`The container has ${total} entries; at most ${limits.maxEntries} are accepted`);
  if (cdOffset + cdSize > eocd) throw new ZipLimitError('The zip central directory points outside the file (truncated or corrupt)');
  if (cdOffset + cdSize < eocd) {
    // JSZip would shift every offset by the gap: what it reads would not be what is checked here
    throw new ZipLimitError(`The zip central directory ends ${eocd - cdOffset - cdSize} bytes before its end record (data hidden or prepended): a corrupt or crafted file`);
  }

  const entries: Entry[] = [];
  const names = new Set<string>();
  let declaredTotal = 0;
  // every header from the directory's offset to the end record, as JSZip reads them (not `total` of them)
  for (let p = cdOffset; p < eocd; ) {
    if (p + 46 > eocd || buf.readUInt32LE(p) !== CEN_SIG) throw new ZipLimitError('The zip central directory is corrupt');
    const nameLength = buf.readUInt16LE(p + 28);
    const extraLength = buf.readUInt16LE(p + 30);
    const next = p + 46 + nameLength + extraLength + buf.readUInt16LE(p + 32);
    if (next > eocd) throw new ZipLimitError('The zip central directory is corrupt');
    if (entries.length === limits.maxEntries) {
      throw new ZipLimitError(`The container has more than ${limits.maxEntries} entries in its central directory; at most ${limits.maxEntries} are accepted`);
    }
    const flags = buf.readUInt16LE(p + 8);
    const rawName = buf.subarray(p + 46, p + 46 + nameLength);
    const entry: Entry = {
      flags,
      method: buf.readUInt16LE(p + 10),
      compressedSize: buf.readUInt32LE(p + 20),
      uncompressedSize: buf.readUInt32LE(p + 24),
      localOffset: buf.readUInt32LE(p + 42),
      rawName,
      name: jszipName(rawName, flags, extraFields(buf, p + 46 + nameLength, p + 46 + nameLength + extraLength), buf.readUInt16LE(p + 4), buf.readUInt32LE(p + 38)),
    };
    p = next;
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
    // a later entry of the same name replaces the earlier one in JSZip: the one read would not be the one checked first
    if (names.has(entry.name)) throw new ZipLimitError(`The container holds "${entry.name}" twice: a corrupt or crafted file`);
    names.add(entry.name);
    entries.push(entry);
  }
  if (entries.length !== total) {
    throw new ZipLimitError(`The zip end record counts ${total} entries but its central directory holds ${entries.length}: a corrupt or crafted file`);
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
    const localNameLength = buf.readUInt16LE(p + 26);
    // JSZip names the entry from its local header: it must be the name checked here
    if (p + 30 + localNameLength > buf.length || !buf.subarray(p + 30, p + 30 + localNameLength).equals(e.rawName)) {
      throw new ZipLimitError(`The zip entry "${e.name}" has another name in its local header: a corrupt or crafted file`);
    }
    const start = p + 30 + localNameLength + buf.readUInt16LE(p + 28);
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
