/**
 * Turns an uploaded file into plain text for chunking and embedding.
 *
 * Output conventions (the chunker relies on them):
 * - paragraphs are separated by a blank line, headings are markdown `#` lines (HTML, DOCX, MD);
 * - CSV: a `Columns: a, b, c` line, then one line per row written as `a: value; b: value` using the
 *   header row, so that every row stays understandable when a chunk holds only some rows of the table;
 * - JSON becomes one `path.to[0].key: value` line per leaf, in document order (JSON Lines too);
 * - HTML tables become one `cell | cell` line per row; images give their alt text;
 * - PDF pages are joined with a blank line and the page count is returned;
 * - line endings are `\n`, NUL characters are removed (Postgres text columns reject them).
 */
import { compile, type DomNode, type FormatCallback, type HtmlToTextOptions } from 'html-to-text';
import mammoth from 'mammoth';
import { extractText as extractPdfText, getDocumentProxy } from 'unpdf';
import { contentMismatch, SNIFF_BYTES } from './sniff.js';
import { checkZipContainer, ZipLimitError, type ZipLimits } from './zip.js';

export { DEFAULT_EXTRACT_LIMITS, detectFormat, ExtractionError, SUPPORTED_FORMATS, type ExtractLimits, type Format } from './formats.js';
import { DEFAULT_EXTRACT_LIMITS, detectFormat, extensionOf, ExtractionError, SUPPORTED_FORMATS, type ExtractLimits, type Format } from './formats.js';

export interface ExtractedDocument {
  text: string;
  /** Number of pages, for PDFs only. */
  pages?: number;
  format: Format;
}

export interface ExtractInput {
  buffer: Buffer;
  mimetype: string;
  originalname: string;
}


export async function extractText(input: ExtractInput, limits: ExtractLimits = DEFAULT_EXTRACT_LIMITS): Promise<ExtractedDocument> {
  const format = detectFormat(input.mimetype, input.originalname);
  if (!format) {
    const ext = extensionOf(input.originalname);
    throw new ExtractionError(
      `Unsupported file type: ${ext ? `.${ext}` : '(no extension)'} (${input.mimetype || 'unknown type'}). ` +
        `Supported: ${SUPPORTED_FORMATS.join(', ')}`,
    );
  }

  // The bytes must agree with the name (also checked at upload; files stored before that are checked here).
  const mismatch = contentMismatch(format, input.buffer.subarray(0, SNIFF_BYTES));
  if (mismatch) throw new ExtractionError(mismatch);

  let text: string;
  let pages: number | undefined;
  try {
    ({ text, pages } = await extractFormat(format, input, limits));
  } catch (err) {
    if (err instanceof ExtractionError) throw err;
    // a parser that recursed too deep (pathological nesting) is the file's problem, not a transient one
    if (err instanceof RangeError && /call stack/i.test(err.message)) throw new ExtractionError('The document is nested too deeply to be read', { cause: err });
    throw err;
  }

  if (text.length > limits.maxTextChars) {
    throw new ExtractionError(`The document holds more than ${limits.maxTextChars} characters of text; split it into smaller files`);
  }
  text = cleanText(text);
  if (!text) throw new ExtractionError('File contains no text');
  return pages === undefined ? { text, format } : { text, pages, format };
}

async function extractFormat(format: Format, input: ExtractInput, limits: ExtractLimits): Promise<{ text: string; pages?: number }> {
  let text: string;
  let pages: number | undefined;
  switch (format) {
    case 'txt':
    case 'md':
      text = decodeText(input.buffer);
      break;
    case 'csv':
      text = csvToText(decodeText(input.buffer), extensionOf(input.originalname) === 'tsv' ? '\t' : undefined);
      break;
    case 'json':
      text = jsonToText(decodeText(input.buffer));
      break;
    case 'html':
      text = htmlToText(decodeText(input.buffer));
      break;
    case 'pdf':
      ({ text, pages } = await pdfToText(input.buffer));
      break;
    case 'docx':
      text = await docxToText(input.buffer, limits);
      break;
  }
  return { text, pages };
}

/** Unifies line endings, drops NULs and trailing spaces, collapses runs of blank lines. */
function cleanText(text: string): string {
  return text
    .replace(/\r\n?/g, '\n')
    .replace(/\u0000/g, '')
    .replace(/[ \t]+$/gm, '')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** UTF-8 (BOM stripped) when valid; UTF-16 when it has a BOM; otherwise latin1, which never fails. */
export function decodeText(buffer: Buffer): string {
  if (buffer.length >= 2 && buffer[0] === 0xff && buffer[1] === 0xfe) return buffer.subarray(2).toString('utf16le');
  if (buffer.length >= 2 && buffer[0] === 0xfe && buffer[1] === 0xff) {
    // Node has no utf16be codec: swap the bytes of a copy.
    const copy = Buffer.from(buffer.subarray(2, buffer.length - (buffer.length % 2)));
    return copy.swap16().toString('utf16le');
  }
  const body = buffer.length >= 3 && buffer[0] === 0xef && buffer[1] === 0xbb && buffer[2] === 0xbf ? buffer.subarray(3) : buffer;
  try {
    return utf8.decode(body);
  } catch {
    return body.toString('latin1');
  }
}

// ---------------------------------------------------------------- CSV

/**
 * RFC 4180 parsing: quoted fields may hold delimiters, doubled quotes and line breaks.
 * Fields are taken as slices of the input (not built char by char): large files parse quickly.
 */
function parseCsv(text: string, delimiter: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  const d = delimiter.charCodeAt(0);
  const n = text.length;
  let i = 0;
  for (;;) {
    // one field starts at i (a quoted field may be preceded by blanks)
    let field: string;
    let j = i;
    while (j < n && text.charCodeAt(j) !== d && (text.charCodeAt(j) === 32 || text.charCodeAt(j) === 9)) j++;
    if (j < n && text.charCodeAt(j) === 34 /* " */) {
      // quoted: up to the closing quote, "" standing for "
      const parts: string[] = [];
      let from = j + 1;
      for (;;) {
        const q = text.indexOf('"', from);
        if (q === -1) {
          parts.push(text.slice(from)); // unterminated: keep the rest
          i = n;
          break;
        }
        parts.push(text.slice(from, q));
        if (text.charCodeAt(q + 1) === 34) {
          parts.push('"');
          from = q + 2;
        } else {
          i = q + 1;
          break;
        }
      }
      field = parts.join('');
      // anything between the closing quote and the delimiter is kept, as lenient parsers do
      let k = i;
      while (k < n && text.charCodeAt(k) !== d && text.charCodeAt(k) !== 10 && text.charCodeAt(k) !== 13) k++;
      if (k > i) field += text.slice(i, k);
      i = k;
    } else {
      let k = i;
      while (k < n && text.charCodeAt(k) !== d && text.charCodeAt(k) !== 10 && text.charCodeAt(k) !== 13) k++;
      field = text.slice(i, k);
      i = k;
    }
    row.push(field);
    if (i >= n) break;
    const c = text.charCodeAt(i);
    i++;
    if (c === d) continue;
    if (c === 13 && text.charCodeAt(i) === 10) i++;
    rows.push(row);
    row = [];
    if (i >= n) break;
  }
  if (row.length > 0) rows.push(row);
  return rows.filter((r) => r.some((f) => f.trim() !== ''));
}

/** Picks the delimiter (comma, semicolon, tab, pipe) that occurs most in the first line. */
function sniffDelimiter(text: string): string {
  const firstLine = text.slice(0, text.search(/\r?\n|$/));
  let best = ',';
  let bestCount = 0;
  for (const candidate of [',', ';', '\t', '|']) {
    const count = firstLine.split(candidate).length - 1;
    if (count > bestCount) {
      best = candidate;
      bestCount = count;
    }
  }
  return best;
}

/**
 * `Columns: …` then one line per data row, `header: value` pairs joined with "; " (empty cells left
 * out). Repeating the column names costs tokens but keeps each row meaningful on its own after chunking.
 */
function csvToText(raw: string, delimiter?: string): string {
  const rows = parseCsv(raw, delimiter ?? sniffDelimiter(raw));
  const header = rows[0];
  if (!header) return '';
  const names = header.map((h, i) => oneLine(h) || `column ${i + 1}`);
  const lines: string[] = [`Columns: ${names.join(', ')}`];
  for (let r = 1; r < rows.length; r++) {
    const cells = rows[r] ?? [];
    const pairs: string[] = [];
    cells.forEach((cell, i) => {
      const value = oneLine(cell);
      if (value) pairs.push(`${names[i] ?? `column ${i + 1}`}: ${value}`);
    });
    if (pairs.length) lines.push(pairs.join('; '));
  }
  return lines.join('\n');
}

function oneLine(s: string): string {
  return s.replace(/\s+/g, ' ').trim();
}

// ---------------------------------------------------------------- JSON

/** The parsed document; JSON Lines (one value per line) is read as an array of those values. */
function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch (err) {
    const lines = raw.split('\n').filter((line) => line.trim() !== '');
    if (lines.length > 1) {
      try {
        return lines.map((line) => JSON.parse(line) as unknown);
      } catch {
        // not JSON Lines either: report the error of the whole document
      }
    }
    throw new ExtractionError(`Invalid JSON: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * One `path: value` line per leaf (walked with an explicit stack, so deep nesting cannot overflow).
 * Nested empty arrays/objects are kept as `path: []`; an empty document gives no text.
 */
function jsonToText(raw: string): string {
  const root = parseJson(raw);
  const lines: string[] = [];
  const stack: Array<{ path: string; value: unknown }> = [{ path: '', value: root }];
  while (stack.length) {
    const { path, value } = stack.pop()!;
    const prefix = path ? `${path}: ` : '';
    if (Array.isArray(value)) {
      if (value.length === 0 && path) lines.push(`${prefix}[]`);
      for (let i = value.length - 1; i >= 0; i--) stack.push({ path: `${path}[${i}]`, value: value[i] });
    } else if (value !== null && typeof value === 'object') {
      const entries = Object.entries(value);
      if (entries.length === 0 && path) lines.push(`${prefix}{}`);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [key, child] = entries[i]!;
        const step = /^[\p{L}_$][\p{L}\p{N}_$-]*$/u.test(key) ? (path ? `.${key}` : key) : `[${JSON.stringify(key)}]`;
        stack.push({ path: path + step, value: child });
      }
    } else {
      lines.push(prefix + (typeof value === 'string' ? value : JSON.stringify(value)));
    }
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------- HTML (also used for DOCX)

/** Headings become markdown `#` lines, so the chunker can start sections on them. */
const markdownHeading: FormatCallback = (elem, walk, builder, formatOptions) => {
  const level = Math.min(6, Math.max(1, Number(formatOptions['level']) || 1));
  builder.openBlock({ leadingLineBreaks: 2 });
  walk(elem.children, builder);
  builder.closeBlock({
    trailingLineBreaks: 2,
    blockTransform: (s) => {
      const t = oneLine(s);
      return t ? `${'#'.repeat(level)} ${t}` : '';
    },
  });
};

/** An image is its alt text (the URL is noise). */
const imageAlt: FormatCallback = (elem, _walk, builder) => {
  const alt = typeof elem.attribs?.alt === 'string' ? oneLine(elem.attribs.alt) : '';
  if (alt) builder.addInline(alt);
};

/**
 * A table is one line per row, cells joined with " | ". Column alignment with spaces (the default)
 * wastes tokens and breaks apart when a chunk boundary falls inside the table.
 */
const pipeTable: FormatCallback = (elem, walk, builder) => {
  builder.openTable();
  const visit = (node: DomNode): void => {
    if (node.type !== 'tag') return;
    if (node.name === 'thead' || node.name === 'tbody' || node.name === 'tfoot') {
      node.children.forEach(visit);
    } else if (node.name === 'tr') {
      builder.openTableRow();
      for (const cell of node.children) {
        if (cell.type !== 'tag' || (cell.name !== 'td' && cell.name !== 'th')) continue;
        builder.openTableCell();
        walk(cell.children, builder);
        builder.closeTableCell();
      }
      builder.closeTableRow();
    }
  };
  elem.children.forEach(visit);
  builder.closeTable({
    leadingLineBreaks: 2,
    trailingLineBreaks: 2,
    tableToString: (rows) =>
      rows
        .map((cells) => cells.map((cell) => oneLine(cell.text)).filter((t) => t !== '').join(' | '))
        .filter((line) => line !== '')
        .join('\n'),
  });
};

const HTML_OPTIONS: HtmlToTextOptions = {
  wordwrap: false,
  // deeper elements are not walked (html-to-text walks the tree recursively); longer input would be cut,
  // but the upload limit keeps every file far below it
  limits: { maxDepth: DEFAULT_EXTRACT_LIMITS.maxHtmlDepth, maxInputLength: DEFAULT_EXTRACT_LIMITS.maxTextChars, ellipsis: '' },
  formatters: { markdownHeading, imageAlt, pipeTable },
  selectors: [
    ...[1, 2, 3, 4, 5, 6].map((level) => ({ selector: `h${level}`, format: 'markdownHeading', options: { level } })),
    // Link text is content; URLs are noise for retrieval.
    { selector: 'a', options: { ignoreHref: true } },
    { selector: 'img', format: 'imageAlt' },
    ...['script', 'style', 'noscript', 'template', 'svg', 'nav', 'iframe', 'object', 'canvas'].map((selector) => ({
      selector,
      format: 'skip',
    })),
    { selector: 'ul', options: { itemPrefix: ' - ' } },
    { selector: 'table', format: 'pipeTable' },
  ],
};

const convertHtml = compile(HTML_OPTIONS);

// The tables of htmlparser2's Parser (10.x, HTML mode): which open tags close which open elements, the
// void elements, the elements that start or end a foreign (SVG, MathML) context, where "<x/>" does close.
const P_TAG = new Set(['p']);
const FORM_TAGS = new Set(['input', 'option', 'optgroup', 'select', 'button', 'datalist', 'textarea']);
const TABLE_SECTION_TAGS = new Set(['thead', 'tbody']);
const DDT_TAGS = new Set(['dd', 'dt']);
const RTP_TAGS = new Set(['rt', 'rp']);
const OPEN_IMPLIES_CLOSE = new Map<string, Set<string>>([
  ['tr', new Set(['tr', 'th', 'td'])],
  ['th', new Set(['th'])],
  ['td', new Set(['thead', 'th', 'td'])],
  ['body', new Set(['head', 'link', 'script'])],
  ['li', new Set(['li'])],
  ...['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6'].map((t) => [t, P_TAG] as const),
  ...['select', 'input', 'output', 'button', 'datalist', 'textarea'].map((t) => [t, FORM_TAGS] as const),
  ['option', new Set(['option'])],
  ['optgroup', new Set(['optgroup', 'option'])],
  ['dd', DDT_TAGS],
  ['dt', DDT_TAGS],
  ...['address', 'article', 'aside', 'blockquote', 'details', 'div', 'dl', 'fieldset', 'figcaption', 'figure', 'footer', 'form', 'header', 'hr', 'main', 'nav', 'ol', 'pre', 'section', 'table', 'ul'].map(
    (t) => [t, P_TAG] as const,
  ),
  ['rt', RTP_TAGS],
  ['rp', RTP_TAGS],
  ['tbody', TABLE_SECTION_TAGS],
  ['tfoot', TABLE_SECTION_TAGS],
]);
const VOID_ELEMENTS = new Set(['area', 'base', 'basefont', 'br', 'col', 'command', 'embed', 'frame', 'hr', 'img', 'input', 'isindex', 'keygen', 'link', 'meta', 'param', 'source', 'track', 'wbr']);
const FOREIGN_CONTEXT = new Set(['math', 'svg']);
const HTML_INTEGRATION = new Set(['mi', 'mo', 'mn', 'ms', 'mtext', 'annotation-xml', 'foreignobject', 'desc', 'title']);
/**
 * Raw-text elements, as htmlparser2's tokenizer recognises them (by their letters after the first two,
 * whatever the first one of t/x: "xitle" and "tmp" are raw text too), and the end tag it looks for.
 */
const RAW_TEXT_END = new Map<string, RegExp>(
  (
    [
      ['script', 'script'],
      ['style', 'style'],
      ['title', 'title'],
      ['xitle', 'title'],
      ['textarea', 'textarea'],
      ['xextarea', 'textarea'],
      ['xmp', 'xmp'],
      ['tmp', 'xmp'],
    ] as const
  ).map(([open, close]) => [open, new RegExp(`[<\\x1c][/\\x0f]${close}[\\t\\n\\f\\r >]`, 'gi')]),
);
// The tokenizer compares "(c | 0x20) === expected": "<" also matches \x1c and "/" matches \x0f; accepting
// them anywhere can only end a raw text earlier than htmlparser2 does, never later (an over-estimate).

const GT = 0x3e;
const SLASH = 0x2f;
const EQ = 0x3d;
const isWhite = (c: number) => c === 0x20 || c === 0x0a || c === 0x09 || c === 0x0c || c === 0x0d;
const isTagEnd = (c: number) => c === SLASH || c === GT || isWhite(c);
const isAsciiAlpha = (c: number) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);

/** Runs the comment-like state of the tokenizer ("-->", "]]>": longer runs like "--->" end it too) from `j`; returns the index of its last character, or -1. */
function endOfCommentLike(html: string, j: number, end: string, matched: number): number {
  for (let si = matched; j < html.length; j++) {
    const c = html.charCodeAt(j);
    if (c === end.charCodeAt(si)) {
      if (++si === end.length) return j;
    } else if (si === 0) {
      const k = html.indexOf(end[0]!, j + 1);
      if (k < 0) return -1;
      j = k;
      si = 1;
    } else if (c !== end.charCodeAt(si - 1)) si = 0;
  }
  return -1;
}

/**
 * The element nesting of `html` as htmlparser2 (HTML mode, as html-to-text runs it) builds it: its
 * tokenizer's states (tags, quoted and unquoted attribute values, comments, CDATA, declarations,
 * processing instructions, the raw text of script, style, title, textarea and xmp) and its parser's
 * stack (void elements, "<x/>" closing only inside SVG/MathML, an open tag closing the elements it
 * implies, an end tag closing up to its element). The depth of an element is that of the DOM node it
 * becomes (void elements included). Linear time: each stack entry is pushed and popped once, and a
 * name count tells at once whether an end tag matches an open element. Stops counting past `max`.
 */
export function htmlDepth(html: string, max: number): number {
  const n = html.length;
  const stack: string[] = [];
  const open = new Map<string, number>();
  const foreign: boolean[] = [false];
  let deepest = 0;
  const reach = (depth: number) => {
    if (depth > deepest) deepest = depth;
  };
  const push = (name: string) => {
    stack.push(name);
    open.set(name, (open.get(name) ?? 0) + 1);
  };
  const pop = (): string => {
    const name = stack.pop()!;
    open.set(name, open.get(name)! - 1);
    return name;
  };
  const openTag = (name: string) => {
    const closes = OPEN_IMPLIES_CLOSE.get(name);
    if (closes) while (stack.length > 0 && closes.has(stack[stack.length - 1]!)) pop();
    reach(stack.length + 1);
    if (VOID_ELEMENTS.has(name)) return;
    push(name);
    if (FOREIGN_CONTEXT.has(name)) foreign.push(true);
    else if (HTML_INTEGRATION.has(name)) foreign.push(false);
  };
  const closeTag = (name: string) => {
    if (FOREIGN_CONTEXT.has(name) || HTML_INTEGRATION.has(name)) foreign.pop();
    if (VOID_ELEMENTS.has(name)) {
      if (name === 'br') reach(stack.length + 1); // "</br>" is a <br>
      return;
    }
    if ((open.get(name) ?? 0) > 0) {
      while (pop() !== name);
    } else if (name === 'p') reach(stack.length + 1); // "</p>" without a <p> is an empty <p>
  };
  /** From `j` (at the ">" of an end tag or after its name): past the ">" that ends it. */
  const afterEndTag = (j: number) => {
    const k = html.charCodeAt(j) === GT ? j : html.indexOf('>', j + 1);
    return k < 0 ? n : k + 1;
  };

  let i = 0;
  while (i < n && deepest <= max) {
    const lt = html.indexOf('<', i);
    if (lt < 0 || lt + 1 >= n) break;
    const c = html.charCodeAt(lt + 1);
    if (c === 0x21 /* ! */) {
      const c2 = html.charCodeAt(lt + 2);
      let end: number;
      if (c2 === 0x2d /* - */ && html.charCodeAt(lt + 3) === 0x2d) end = endOfCommentLike(html, lt + 4, '-->', 2);
      else if (c2 === 0x5b /* [ */) {
        let k = 0;
        while (k < 6 && html.charCodeAt(lt + 3 + k) === 'CDATA['.charCodeAt(k)) k++;
        // a mismatch is read again as part of a declaration
        end = k === 6 ? endOfCommentLike(html, lt + 9, ']]>', 0) : html.indexOf('>', lt + 3 + k);
      } else if (c2 === 0x2d) end = html.indexOf('>', lt + 4); // "<!-" then any character (not read again)
      else end = html.indexOf('>', lt + 3); // "<!" then any character (not read again), up to ">"
      i = end < 0 ? n : end + 1;
      continue;
    }
    if (c === 0x3f /* ? */) {
      const end = html.indexOf('>', lt + 2);
      i = end < 0 ? n : end + 1;
      continue;
    }
    if (c === SLASH) {
      let j = lt + 2;
      while (j < n && isWhite(html.charCodeAt(j))) j++;
      if (j >= n) break;
      const d = html.charCodeAt(j);
      if (d === GT) {
        i = j + 1;
      } else if (isAsciiAlpha(d)) {
        let k = j + 1;
        while (k < n && html.charCodeAt(k) !== GT && !isWhite(html.charCodeAt(k))) k++;
        if (k >= n) break; // an end tag cut off by the end of the file is dropped
        closeTag(html.slice(j, k).toLowerCase());
        i = afterEndTag(k);
      } else {
        const end = html.indexOf('>', j + 1); // "</" then not a letter: a comment up to ">"
        i = end < 0 ? n : end + 1;
      }
      continue;
    }
    if (!isAsciiAlpha(c)) {
      i = lt + 1; // text; the next character is read again (it may be a "<")
      continue;
    }
    // an open tag: its name, then its attributes
    let j = lt + 2;
    while (j < n && !isTagEnd(html.charCodeAt(j))) j++;
    if (j >= n) break; // a tag cut off by the end of the file is dropped
    const name = html.slice(lt + 1, j).toLowerCase();
    openTag(name);
    let selfClosing = false;
    let state: 'before' | 'slash' | 'name' | 'afterName' | 'beforeValue' | 'unquoted' = 'before';
    for (; j < n; ) {
      const d = html.charCodeAt(j);
      if (state === 'before') {
        if (d === GT) break;
        if (d === SLASH) state = 'slash';
        else if (!isWhite(d)) state = 'name';
        j++;
      } else if (state === 'slash') {
        if (d === GT) {
          selfClosing = true;
          break;
        }
        if (isWhite(d)) j++;
        else state = 'before';
      } else if (state === 'name') {
        if (d === EQ || isTagEnd(d)) state = 'afterName';
        else j++;
      } else if (state === 'afterName') {
        if (d === EQ) state = 'beforeValue';
        else if (d === SLASH || d === GT) {
          state = 'before';
          continue;
        } else if (!isWhite(d)) state = 'name';
        j++;
      } else if (state === 'beforeValue') {
        if (d === 0x22 /* " */ || d === 0x27 /* ' */) {
          const close = html.indexOf(d === 0x22 ? '"' : "'", j + 1);
          j = close < 0 ? n : close + 1;
          state = 'before';
        } else if (isWhite(d)) j++;
        else state = 'unquoted';
      } else if (isWhite(d) || d === GT) state = 'before';
      else j++;
    }
    if (j >= n) break; // the tag never ends: the rest of the file is inside it
    i = j + 1;
    if (selfClosing) {
      // "<x/>" closes x only in a foreign (SVG, MathML) context; in HTML the slash is ignored
      if (foreign[foreign.length - 1] && stack[stack.length - 1] === name) pop();
      continue;
    }
    const rawEnd = RAW_TEXT_END.get(name);
    if (rawEnd) {
      rawEnd.lastIndex = i;
      const m = rawEnd.exec(html);
      if (!m) break; // raw text to the end of the file
      const nameEnd = m.index + m[0].length - 1;
      closeTag(html.slice(m.index + 2, nameEnd).toLowerCase());
      i = afterEndTag(nameEnd);
    }
  }
  return deepest;
}

function htmlToText(html: string): string {
  const max = DEFAULT_EXTRACT_LIMITS.maxHtmlDepth;
  if (htmlDepth(html, max) > max) throw new ExtractionError(`The HTML is nested more than ${max} elements deep; it was not read`);
  return convertHtml(html);
}

// ---------------------------------------------------------------- PDF

async function pdfToText(buffer: Buffer): Promise<{ text: string; pages: number }> {
  let pageTexts: string[];
  let pages: number;
  try {
    // pdf.js takes ownership of (detaches) the bytes it is given: hand it a copy.
    const pdf = await getDocumentProxy(new Uint8Array(buffer), { verbosity: 0 });
    try {
      const result = await extractPdfText(pdf, { mergePages: false });
      pageTexts = result.text;
      pages = result.totalPages;
    } finally {
      await pdf.destroy().catch(() => undefined);
    }
  } catch (err) {
    throw new ExtractionError(`Could not read PDF: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
  const nonEmpty = pageTexts.map((t) => t.trim()).filter((t) => t !== '');
  if (nonEmpty.length === 0) throw new ExtractionError('PDF has no extractable text (scanned image?)');
  return { text: nonEmpty.join('\n\n'), pages };
}

// ---------------------------------------------------------------- DOCX

/** mammoth maps Word heading styles to <h1>…<h6>; the HTML conversion then turns them into `#` lines. */
async function docxToText(buffer: Buffer, limits: ZipLimits): Promise<string> {
  try {
    checkZipContainer(buffer, limits);
  } catch (err) {
    if (err instanceof ZipLimitError) throw new ExtractionError(`Could not read DOCX: ${err.message}`, { cause: err });
    throw err;
  }
  let html: string;
  try {
    // externalFileAccess stays off: a document must not make us read local files.
    html = (await mammoth.convertToHtml({ buffer }, { externalFileAccess: false })).value;
  } catch (err) {
    throw new ExtractionError(`Could not read DOCX: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
  return htmlToText(html);
}
