/**
 * What the first bytes of a file say it is, whatever its name claims. The format of an upload comes
 * from its extension (else its media type); the bytes must then agree: a PDF has `%PDF-` in its first 1 KB, a
 * DOCX is a zip, and the text formats (txt, md, csv, json, html) are text — no known binary
 * signature, no NUL byte (UTF-16 with a byte-order mark excepted). PNG bytes named `notes.txt` are
 * refused instead of being indexed as text.
 */
import type { Format } from './formats.js';

/** How many leading bytes are looked at. */
export const SNIFF_BYTES = 4096;

interface Signature {
  label: string;
  /** Byte values; null matches any byte. */
  bytes: Array<number | null>;
  offset?: number;
}

const ascii = (s: string) => [...s].map((c) => c.charCodeAt(0));

const SIGNATURES: Signature[] = [
  { label: 'a PNG image', bytes: [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a] },
  { label: 'a JPEG image', bytes: [0xff, 0xd8, 0xff] },
  { label: 'a GIF image', bytes: ascii('GIF87a') },
  { label: 'a GIF image', bytes: ascii('GIF89a') },
  { label: 'a WebP image', bytes: [...ascii('RIFF'), null, null, null, null, ...ascii('WEBP')] },
  { label: 'a TIFF image', bytes: [0x49, 0x49, 0x2a, 0x00] },
  { label: 'a TIFF image', bytes: [0x4d, 0x4d, 0x00, 0x2a] },
  { label: 'an ICO image', bytes: [0x00, 0x00, 0x01, 0x00] },
  { label: 'a PDF document', bytes: ascii('%PDF-') },
  { label: 'a zip archive', bytes: [0x50, 0x4b, 0x03, 0x04] },
  { label: 'a zip archive', bytes: [0x50, 0x4b, 0x05, 0x06] },
  { label: 'a gzip archive', bytes: [0x1f, 0x8b] },
  { label: 'a 7-Zip archive', bytes: [0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c] },
  { label: 'a RAR archive', bytes: ascii('Rar!\x1a\x07') },
  { label: 'an xz archive', bytes: [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00] },
  { label: 'a bzip2 archive', bytes: [...ascii('BZh'), null, 0x31, 0x41, 0x59, 0x26, 0x53, 0x59] },
  { label: 'an ELF executable', bytes: [0x7f, 0x45, 0x4c, 0x46] },
  { label: 'a Mach-O executable', bytes: [0xcf, 0xfa, 0xed, 0xfe] },
  { label: 'a Mach-O executable', bytes: [0xfe, 0xed, 0xfa, 0xcf] },
  { label: 'a WebAssembly module', bytes: [0x00, 0x61, 0x73, 0x6d] },
  { label: 'an OLE2 (legacy Office) document', bytes: [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1] },
  { label: 'an SQLite database', bytes: ascii('SQLite format 3\0') },
  { label: 'an MP4/QuickTime video', bytes: ascii('ftyp'), offset: 4 },
  { label: 'an Ogg media file', bytes: [...ascii('OggS'), 0x00] },
  { label: 'an MP3 audio file', bytes: [...ascii('ID3'), null, 0x00] },
];

function matches(head: Uint8Array, sig: Signature): boolean {
  const offset = sig.offset ?? 0;
  if (head.length < offset + sig.bytes.length) return false;
  return sig.bytes.every((b, i) => b === null || head[offset + i] === b);
}

/** The label of a known binary signature at the start of `head`, if any. */
export function binarySignature(head: Uint8Array): string | null {
  for (const sig of SIGNATURES) if (matches(head, sig)) return sig.label;
  return null;
}

function hasUtf16Bom(head: Uint8Array): boolean {
  return head.length >= 2 && ((head[0] === 0xff && head[1] === 0xfe) || (head[0] === 0xfe && head[1] === 0xff));
}

/**
 * Whether `head` looks like text: no known binary signature, and few control bytes. Random binary data
 * has about 10% of them; a text file may carry a stray NUL, which extraction removes.
 */
export function looksLikeText(head: Uint8Array): boolean {
  if (binarySignature(head)) return false;
  if (hasUtf16Bom(head)) return true;
  const n = Math.min(head.length, SNIFF_BYTES);
  let control = 0;
  for (let i = 0; i < n; i++) {
    const b = head[i]!;
    if (b < 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0b && b !== 0x0c && b !== 0x0d && b !== 0x1b) control++;
  }
  return control <= Math.max(2, n * 0.01);
}

/**
 * null when the bytes agree with the format; else why not, as a sentence for the uploader.
 * `head` is at least the first SNIFF_BYTES bytes of the file (or all of it).
 */
export function contentMismatch(format: Format, head: Uint8Array): string | null {
  const found = binarySignature(head);
  switch (format) {
    case 'pdf': {
      // PDF readers accept a header within the first 1024 bytes
      const at = Buffer.from(head.buffer, head.byteOffset, Math.min(head.length, 1024)).indexOf('%PDF-');
      return at >= 0 ? null : `The file is named as a PDF but its content is ${found ?? 'not a PDF'}`;
    }
    case 'docx':
      return found === 'a zip archive' ? null : `The file is named as a DOCX but its content is ${found ?? 'not a DOCX (zip) document'}`;
    default:
      if (found) return `The file is named as ${format} text but its content is ${found}`;
      if (!looksLikeText(head)) return `The file is named as ${format} text but its content is binary data`;
      return null;
  }
}
