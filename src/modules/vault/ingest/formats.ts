/**
 * What the vault accepts and how its files are told apart, with the parsers' bounds and their error:
 * the parts of extraction the request path needs (upload validation, OpenAPI, the job handler), kept
 * apart from the parsers themselves (extract.ts: html-to-text, mammoth, unpdf), which only the
 * ingestion sandbox loads.
 */
import type { ZipLimits } from './zip.js';

export const SUPPORTED_FORMATS = ['txt', 'md', 'csv', 'json', 'html', 'pdf', 'docx'] as const;
export type Format = (typeof SUPPORTED_FORMATS)[number];

/**
 * Bounds of the parsers (memory and time are bounded too, by the worker thread that runs them:
 * see sandbox.ts). Zip containers: see zip.ts. HTML (also DOCX, converted to HTML): nesting deeper than
 * `maxHtmlDepth` is refused before parsing — htmlparser2 takes quadratic time in the depth (40,000
 * nested divs: 2.5 s; 200,000: over 30 s) and html-to-text walks the tree recursively.
 */
export interface ExtractLimits extends ZipLimits {
  maxHtmlDepth: number;
  /** Characters of extracted text; a document beyond it is refused rather than indexed in part. */
  maxTextChars: number;
}

export const DEFAULT_EXTRACT_LIMITS: ExtractLimits = {
  maxInflatedBytes: 100 * 1024 * 1024,
  maxCompressionRatio: 100,
  maxEntries: 5000,
  maxHtmlDepth: 1024,
  maxTextChars: 64 * 1024 * 1024,
};

/** A file that cannot be turned into text; `message` is safe to show to the uploader. */
export class ExtractionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ExtractionError';
  }
}

const EXTENSIONS: Record<string, Format> = {
  txt: 'txt',
  text: 'txt',
  log: 'txt',
  md: 'md',
  markdown: 'md',
  mdown: 'md',
  csv: 'csv',
  tsv: 'csv',
  json: 'json',
  jsonl: 'json',
  ndjson: 'json',
  html: 'html',
  htm: 'html',
  xhtml: 'html',
  pdf: 'pdf',
  docx: 'docx',
};

const MIMETYPES: Record<string, Format> = {
  'text/plain': 'txt',
  'text/markdown': 'md',
  'text/x-markdown': 'md',
  'text/csv': 'csv',
  'application/csv': 'csv',
  'text/tab-separated-values': 'csv',
  'application/json': 'json',
  'text/json': 'json',
  'application/x-ndjson': 'json',
  'application/jsonl': 'json',
  'text/html': 'html',
  'application/xhtml+xml': 'html',
  'application/pdf': 'pdf',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': 'docx',
};

export function extensionOf(originalname: string): string {
  const base = originalname.split(/[\\/]/).pop() ?? '';
  const dot = base.lastIndexOf('.');
  return dot > 0 ? base.slice(dot + 1).toLowerCase() : '';
}

/** The format of a file: its extension decides when known (browsers often send octet-stream), else its mimetype. */
export function detectFormat(mimetype: string, originalname: string): Format | null {
  const byExtension = EXTENSIONS[extensionOf(originalname)];
  if (byExtension) return byExtension;
  const mime = (mimetype.split(';')[0] ?? '').trim().toLowerCase();
  const byMime = MIMETYPES[mime];
  if (byMime) return byMime;
  if (/^application\/[\w.+-]+\+json$/.test(mime)) return 'json';
  return null;
}
