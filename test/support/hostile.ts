import { createDeflateRaw, crc32, deflateRawSync } from 'node:zlib';

/**
 * Hostile files built by the tests themselves: zip containers written byte by byte (so that declared
 * sizes can lie), DOCX bombs, XML entity bombs, deeply nested HTML, corrupt PDFs and polyglots.
 */

export interface ZipEntryInput {
  name: string;
  /** Raw deflate data (method 8) or stored bytes (method 0). */
  data: Buffer;
  method: 0 | 8;
  crc: number;
  uncompressedSize: number;
  /** What the headers claim; defaults to the truth. */
  declaredSize?: number;
}

/** A zip container; each entry's headers carry `declaredSize` when given. */
export function buildZip(entries: ZipEntryInput[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = Buffer.from(e.name, 'utf8');
    const size = e.declaredSize ?? e.uncompressedSize;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0, 6);
    local.writeUInt16LE(e.method, 8);
    local.writeUInt32LE(e.crc >>> 0, 14);
    local.writeUInt32LE(e.data.length, 18);
    local.writeUInt32LE(size, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(0, 8);
    central.writeUInt16LE(e.method, 10);
    central.writeUInt32LE(e.crc >>> 0, 16);
    central.writeUInt32LE(e.data.length, 20);
    central.writeUInt32LE(size, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, e.data);
    centrals.push(central, name);
    offset += local.length + name.length + e.data.length;
  }
  const cd = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}

export function deflated(name: string, content: Buffer | string): ZipEntryInput {
  const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
  return { name, data: deflateRawSync(bytes), method: 8, crc: crc32(bytes), uncompressedSize: bytes.length };
}

/** Raw deflate of head + `filler` repeated to `totalBytes` + tail, streamed (never held inflated in memory). */
export async function deflatedRepeat(name: string, head: string, filler: string, totalBytes: number, tail: string): Promise<ZipEntryInput> {
  const deflate = createDeflateRaw({ level: 9 });
  const out: Buffer[] = [];
  deflate.on('data', (d: Buffer) => out.push(d));
  const done = new Promise<void>((resolve, reject) => {
    deflate.on('end', resolve);
    deflate.on('error', reject);
  });
  const headBuf = Buffer.from(head);
  const tailBuf = Buffer.from(tail);
  const block = Buffer.from(filler.repeat(Math.ceil((1 << 20) / filler.length)).slice(0, 1 << 20));
  let crc = crc32(headBuf);
  const write = (b: Buffer) =>
    new Promise<void>((resolve) => {
      if (deflate.write(b)) resolve();
      else deflate.once('drain', resolve);
    });
  await write(headBuf);
  let left = totalBytes - headBuf.length - tailBuf.length;
  while (left > 0) {
    const piece = left >= block.length ? block : block.subarray(0, left);
    crc = crc32(piece, crc);
    await write(piece);
    left -= piece.length;
  }
  crc = crc32(tailBuf, crc);
  deflate.end(tailBuf);
  await done;
  return { name, data: Buffer.concat(out), method: 8, crc, uncompressedSize: totalBytes };
}

const W = 'http://schemas.openxmlformats.org/wordprocessingml/2006/main';
const CONTENT_TYPES =
  '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' +
  '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">' +
  '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>' +
  '<Default Extension="xml" ContentType="application/xml"/>' +
  '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>' +
  '</Types>';
const RELS =
  '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' +
  '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">' +
  '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>' +
  '</Relationships>';

export const DOCUMENT_HEAD = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="${W}"><w:body><w:p><w:r><w:t>`;
export const DOCUMENT_TAIL = '</w:t></w:r></w:p></w:body></w:document>';

/** A minimal DOCX (mammoth reads it) whose word/document.xml is the given entry. */
export function docxWith(documentXml: ZipEntryInput): Buffer {
  return buildZip([deflated('[Content_Types].xml', CONTENT_TYPES), deflated('_rels/.rels', RELS), documentXml]);
}

/** A DOCX of one paragraph. */
export function plainDocx(text: string): Buffer {
  return docxWith(deflated('word/document.xml', DOCUMENT_HEAD + text + DOCUMENT_TAIL));
}

/** A DOCX whose single paragraph inflates to `totalBytes` (a run of one letter: ~1000:1). */
export async function docxBomb(totalBytes: number, options: { declaredSize?: number } = {}): Promise<Buffer> {
  const entry = await deflatedRepeat('word/document.xml', DOCUMENT_HEAD, 'A', totalBytes, DOCUMENT_TAIL);
  if (options.declaredSize !== undefined) entry.declaredSize = options.declaredSize;
  return docxWith(entry);
}

/** The "billion laughs" entity expansion inside word/document.xml. */
export function xmlBombDocx(): Buffer {
  let dtd = '<!ENTITY lol0 "lollollollollollollollollollol">';
  for (let i = 1; i <= 9; i++) dtd += `<!ENTITY lol${i} "${`&lol${i - 1};`.repeat(10)}">`;
  const xml = `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE w:document [${dtd}]><w:document xmlns:w="${W}"><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>`;
  return docxWith(deflated('word/document.xml', xml));
}

/** HTML with some visible text, then `depth` nested elements around more text. */
export function deeplyNestedHtml(depth: number): string {
  return `<html><body><p>Visible introduction about deep nesting.</p>${'<div>'.repeat(depth)}buried text${'</div>'.repeat(depth)}</body></html>`;
}

/** The 8-byte PNG signature, an IHDR chunk and noise: an image, whatever its name says. */
export function pngBytes(): Buffer {
  const ihdr = Buffer.from('0000000d49484452000000100000001008060000001ff3ff61', 'hex');
  const noise = Buffer.alloc(2048);
  for (let i = 0; i < noise.length; i++) noise[i] = (i * 7919 + 13) & 0xff;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), ihdr, noise]);
}
