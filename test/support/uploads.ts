import assert from 'node:assert/strict';
import { AlignmentType, Document, HeadingLevel, Packer, Paragraph, TextRun } from 'docx';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import type { App } from '../../src/app.js';
import { bearer } from './app.js';

/** Helpers of the vault tests: real multipart bodies, real PDF and DOCX files, waiting for ingestion. */

export interface FilePart {
  name: string;
  content: Buffer | Uint8Array | string;
  type?: string;
}

export interface MultipartOptions {
  /** The file part before the fields (as curl -F and many FormData clients send it); default: fields first. */
  fileFirst?: boolean;
}

/** A multipart/form-data body as a browser would send it (built by the platform's FormData). */
export async function multipartBody(fields: Record<string, string>, file?: FilePart, options: MultipartOptions = {}): Promise<{ payload: Buffer; contentType: string }> {
  const form = new FormData();
  const appendFile = () => {
    if (!file) return;
    const bytes = typeof file.content === 'string' ? new TextEncoder().encode(file.content) : new Uint8Array(file.content);
    form.append('file', new Blob([bytes], { type: file.type ?? 'application/octet-stream' }), file.name);
  };
  if (options.fileFirst) appendFile();
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  if (!options.fileFirst) appendFile();
  const res = new Response(form);
  return { payload: Buffer.from(await res.arrayBuffer()), contentType: res.headers.get('content-type')! };
}

export async function uploadFile(app: App, token: string, file: FilePart | undefined, fields: Record<string, string> = {}, options: MultipartOptions = {}) {
  const { payload, contentType } = await multipartBody(fields, file, options);
  return app.inject({ method: 'POST', url: '/api/user/files', headers: { ...bearer(token), 'content-type': contentType }, payload });
}

/** Uploads and asserts the 201; returns the record. */
export async function uploadOk(app: App, token: string, file: FilePart, fields: Record<string, string> = {}) {
  const res = await uploadFile(app, token, file, fields);
  assert.equal(res.statusCode, 201, res.body);
  return res.json().data as Record<string, any>;
}

/** Polls the record until its status leaves 'processing' (bounded). */
export async function waitForIngestion(app: App, token: string, id: string, timeoutMs = 20_000): Promise<Record<string, any>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await app.inject({ method: 'GET', url: `/api/user/files/${id}`, headers: bearer(token) });
    assert.equal(res.statusCode, 200, res.body);
    const data = res.json().data;
    if (data.status !== 'processing') return data;
    if (Date.now() > deadline) throw new Error(`upload ${id} still processing after ${timeoutMs} ms (stage ${data.stage}, progress ${data.progress})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A real PDF with one text page per entry (Helvetica, wrapped lines). */
export async function makePdf(pages: string[]): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  for (const text of pages) {
    const page = doc.addPage([595, 842]);
    const words = text.split(/\s+/);
    const lines: string[] = [];
    let line = '';
    for (const w of words) {
      if ((line + ' ' + w).length > 90) {
        lines.push(line);
        line = w;
      } else line = line ? `${line} ${w}` : w;
    }
    if (line) lines.push(line);
    let y = 800;
    for (const l of lines) {
      if (y < 40) break;
      page.drawText(l, { x: 40, y, size: 10, font });
      y -= 14;
    }
  }
  return Buffer.from(await doc.save());
}

/** A real DOCX: a heading and paragraphs. */
export async function makeDocx(heading: string, paragraphs: string[]): Promise<Buffer> {
  const doc = new Document({
    sections: [
      {
        children: [
          new Paragraph({ text: heading, heading: HeadingLevel.HEADING_1 }),
          ...paragraphs.map((p) => new Paragraph({ alignment: AlignmentType.LEFT, children: [new TextRun(p)] })),
        ],
      },
    ],
  });
  return Packer.toBuffer(doc);
}
