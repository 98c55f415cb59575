import { createHash, type Hash } from 'node:crypto';
import { Readable } from 'node:stream';
import type { AppContext } from '../../context.js';
import { enqueue, notifyQueue } from '../../platform/jobs.js';
import { BlobNotFoundError, uploadKey, type BlobStorage } from '../../providers/storage/index.js';
import type { DbOrTx } from '../../db/client.js';
import { AppError, badField, conflict, forbidden, notFound, payloadTooLarge, validationFailed } from '../../shared/errors.js';
import { isUuid, newId } from '../../shared/ids.js';
import { pageWindow } from '../../shared/schemas.js';
import type { AuthContext } from '../identity/auth-context.js';
import { findVisibleCollection, type CollectionRef } from './collections.repository.js';
import { detectFormat, SUPPORTED_FORMATS, type Format } from './ingest/formats.js';
import { contentMismatch, SNIFF_BYTES } from './ingest/sniff.js';
import { INGEST_MAX_ATTEMPTS, INGEST_QUEUE } from './ingest/pipeline.js';
import * as repo from './uploads.repository.js';
import type { UploadListFilters, UploadRow } from './uploads.repository.js';
import type { FileStatusFilter } from './uploads.schemas.js';
import { cleanFileName, fileNameTerm, visibleText } from './text.js';
import { assertMayUploadTo, assertMemberOf, assertModify, assertPrivacyChange, placementFor, samePlace, VAULT_SCOPES, type VaultScope } from './vault.policy.js';

/** What the service needs of a multipart part (the shape @fastify/multipart yields). */
export type UploadPart =
  | { type: 'field'; fieldname: string; value: unknown; valueTruncated?: boolean }
  | { type: 'file'; fieldname: string; filename: string; mimetype: string; file: Readable & { truncated?: boolean } };

/** The media type stored and served for each format: never the client's claim (a .txt sent as text/html stays text). */
const MIMETYPES: Record<Format, string> = {
  txt: 'text/plain',
  md: 'text/markdown',
  csv: 'text/csv',
  json: 'application/json',
  html: 'text/html',
  pdf: 'application/pdf',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
};

const FORM_FIELDS = ['scope', 'institution', 'collection', 'file_title', 'is_private', 'confidential'] as const;
type FormField = (typeof FORM_FIELDS)[number];
/** The form fields that decide where a file goes (and so whether it may be stored at all). */
const DESTINATION_FIELDS: readonly FormField[] = ['scope', 'institution', 'collection'];
const MUTABLE_STATUSES = ['active', 'inactive', 'selected'];

export interface ListUploadsInput {
  scope?: VaultScope;
  institution?: string;
  collection?: string;
  status?: FileStatusFilter;
  fileNameSearch?: string;
  page?: number;
  pageSize?: number;
}

export interface PatchUploadInput {
  file_title?: string;
  status?: 'active' | 'inactive' | 'selected';
  collection?: string | null;
  is_private?: boolean;
  confidential?: boolean;
}

function parseBoolean(field: string, raw: string | undefined): boolean | undefined {
  if (raw === undefined || raw === '') return undefined;
  const v = raw.trim().toLowerCase();
  if (v === 'true') return true;
  if (v === 'false') return false;
  throw badField(field, `${field} must be "true" or "false"`);
}

/** The client sent a broken multipart body (bad boundary, truncated part, ...). */
class MalformedBody extends Error {}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Parts of the form; a parser failure without a code of its own is the client's malformed body. */
async function* readParts(parts: AsyncIterable<UploadPart>): AsyncGenerator<UploadPart> {
  const it = parts[Symbol.asyncIterator]();
  for (;;) {
    let next: IteratorResult<UploadPart>;
    try {
      next = await it.next();
    } catch (err) {
      if ((err as { code?: string } | null)?.code) throw err;
      throw new MalformedBody(messageOf(err));
    }
    if (next.done) return;
    yield next.value;
  }
}

/**
 * The file's bytes, hashed on the way to storage. Iterating (rather than piping) also surfaces an
 * error the part stream met before we started reading it.
 */
async function* hashed(file: AsyncIterable<Buffer>, hash: Hash, head: { bytes: Buffer }): AsyncGenerator<Buffer> {
  const it = file[Symbol.asyncIterator]();
  for (;;) {
    let next: IteratorResult<Buffer>;
    try {
      next = await it.next();
    } catch (err) {
      throw new MalformedBody(messageOf(err));
    }
    if (next.done) return;
    hash.update(next.value);
    if (head.bytes.length < SNIFF_BYTES) head.bytes = Buffer.concat([head.bytes, next.value.subarray(0, SNIFF_BYTES - head.bytes.length)]);
    yield next.value;
  }
}

/** 403 with the quota in details: `quota` (files | bytes), `used`, `limit`. */
function quotaExceeded(message: string, quota: 'files' | 'bytes', used: number, limit: number): AppError {
  return new AppError(403, 'FORBIDDEN', message, [{ field: 'file', message, reason: 'personal_quota', quota, used, limit }]);
}

/** The multipart parser's failures are errors of the request: 400 with a clear message. */
function formLimitError(err: unknown): unknown {
  if (err instanceof MalformedBody) return validationFailed(`Malformed multipart body: ${err.message}`);
  switch ((err as { code?: string } | null)?.code) {
    case 'FST_FILES_LIMIT':
      return badField('file', 'Send exactly one file per request');
    case 'FST_FIELDS_LIMIT':
    case 'FST_PARTS_LIMIT':
      return validationFailed('Too many form fields');
    default:
      return err;
  }
}

interface ParsedForm {
  scope?: VaultScope;
  institution?: string;
  collection?: string;
  file_title?: string;
  is_private?: boolean;
  confidential?: boolean;
}

/** Where a new file goes, once the caller is allowed to put it there. */
interface Destination {
  scope: VaultScope;
  institutionId: string | null;
  accountId: string;
  collection?: CollectionRef;
}

/**
 * Vault files: upload (authorised from the fields before the file's bytes are stored, streamed to
 * blob storage while hashed, then one transaction that checks again under row locks, inserts the
 * record and enqueues its ingestion), listing, reading, download, update and delete — every access
 * decided by vault.policy.
 */
export class UploadsService {
  constructor(
    private readonly ctx: AppContext,
    private readonly storage: BlobStorage,
  ) {}

  // ───────────── create ─────────────

  async create(auth: AuthContext, parts: AsyncIterable<UploadPart>): Promise<UploadRow> {
    const id = newId();
    const key = uploadKey(id);
    const fields: Partial<Record<FormField, string>> = {};
    let file: { originalname: string; format: Format; size: number; sha256: string } | undefined;
    /** The pre-check refused the fields that came before the file: its error, and those fields. */
    let refused: { error: unknown; fields: string } | undefined;
    let stored = false;
    try {
      for await (const part of readParts(parts)) {
        if (part.type === 'field') {
          if (!(FORM_FIELDS as readonly string[]).includes(part.fieldname)) continue; // unknown fields are ignored
          if (part.valueTruncated) throw badField(part.fieldname, `${part.fieldname} is too long`);
          if (typeof part.value !== 'string') throw badField(part.fieldname, `${part.fieldname} must be text`);
          fields[part.fieldname as FormField] = part.value;
          this.parseForm(fields); // a bad field is refused as it arrives: before any file is stored
          continue;
        }
        if (part.fieldname !== 'file') {
          part.file.resume();
          throw badField(part.fieldname, `Unexpected file field "${part.fieldname}": send the file in the part named "file"`);
        }
        const originalname = cleanFileName(part.filename ?? '');
        if (!originalname) {
          part.file.resume();
          throw badField('file', 'The file part has no file name');
        }
        const format = detectFormat(part.mimetype ?? '', originalname);
        if (!format) {
          part.file.resume();
          throw badField('file', `Unsupported file type "${originalname}" (${part.mimetype || 'no media type'}). Supported types: ${SUPPORTED_FORMATS.join(', ')}`);
        }
        // Nothing is stored for a caller who may not upload here when the fields that decide where the
        // file goes came first: they decide (no locks: the transaction below checks again), and the
        // bytes of a refused file are read and dropped. When none of them came before the file (curl -F
        // and many FormData clients send it first), the later fields may still change the destination:
        // the file is stored and the transaction decides (a refusal deletes the stored bytes).
        const form = this.parseForm(fields);
        const destinationKnown = DESTINATION_FIELDS.some((f) => fields[f] !== undefined);
        const precheck = !destinationKnown
          ? undefined
          : await this.destination(this.ctx.db, auth, form, { lock: false }).then(
              () => undefined,
              (err: unknown) => err ?? new Error('upload refused'),
            );
        if (precheck !== undefined) {
          part.file.resume();
          refused = { error: precheck, fields: JSON.stringify(fields) };
          continue;
        }
        const hash = createHash('sha256');
        const head = { bytes: Buffer.alloc(0) };
        stored = true;
        const { size } = await this.storage.put(key, Readable.from(hashed(part.file, hash, head)));
        if (part.file.truncated) {
          throw payloadTooLarge(`The file is larger than the upload limit of ${this.ctx.config.uploadMaxBytes} bytes`);
        }
        if (size === 0) throw badField('file', 'The file is empty');
        // the bytes must be what the name says (PNG bytes named .txt are not indexed as text)
        const mismatch = contentMismatch(format, head.bytes);
        if (mismatch) throw new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', mismatch, [{ field: 'file', message: mismatch }]);
        file = { originalname, format, size, sha256: hash.digest('hex') };
      }
      if (refused) {
        if (JSON.stringify(fields) === refused.fields) throw refused.error;
        // Fields came after the file and may change the answer: decide with all of them. Allowed
        // now, but the bytes were not kept: the client must send its fields first.
        await this.destination(this.ctx.db, auth, this.parseForm(fields), { lock: false });
        throw badField('file', 'Send the form fields before the file part: they decide whether and where the file may be stored');
      }
      if (!file) throw badField('file', 'A file is required: send it as the multipart part "file"');
      const theFile = file;
      const input = this.parseForm(fields);

      const now = this.ctx.clock.now();
      const row = await this.ctx.db.transaction(async (tx) => {
        const to = await this.destination(tx, auth, input, { lock: true, size: theFile.size });
        const created = await repo.insertUpload(tx, {
          id,
          originalname: theFile.originalname,
          filesize: theFile.size,
          mimetype: MIMETYPES[theFile.format],
          fileTitle: input.file_title ?? theFile.originalname,
          scope: to.scope,
          ownerUserId: auth.userId,
          institutionId: to.institutionId,
          accountId: to.accountId,
          collectionId: to.collection?.id ?? null,
          isPrivate: input.is_private ?? false,
          confidential: input.confidential ?? false,
          status: 'processing',
          stage: 'queued',
          progress: 0,
          storageKey: key,
          sha256: theFile.sha256,
          createdAt: now,
          updatedAt: now,
        });
        await enqueue(tx, INGEST_QUEUE, { uploadId: id }, { runAt: now, maxAttempts: INGEST_MAX_ATTEMPTS });
        return created;
      });
      notifyQueue(INGEST_QUEUE);
      return row;
    } catch (err) {
      if (stored) await this.storage.delete(key).catch((e: unknown) => this.ctx.log.warn({ err: e, key }, 'could not remove a rejected upload'));
      throw formLimitError(err);
    }
  }

  /**
   * Where a new file goes and whether the caller may put it there: the collection (visible, same
   * place), the scope and institution (membership), the institution's disableFileUploadForUser and
   * maxFiles. Run twice: without locks before any byte is stored (an early refusal), then in the write
   * transaction with locks — the collection shared (a concurrent delete of it waits, or has happened
   * and it is not found) and the institution row exclusive (concurrent uploads count one at a time).
   */
  private async destination(db: DbOrTx, auth: AuthContext, input: ParsedForm, options: { lock: boolean; size?: number }): Promise<Destination> {
    const collection = input.collection ? await findVisibleCollection(db, auth, input.collection, options.lock ? { lock: 'share' } : {}) : undefined;
    if (input.collection && !collection) throw notFound('Collection');
    const scope: VaultScope = input.scope ?? collection?.scope ?? (input.institution || auth.institutionId ? 'instance' : 'personal');
    if (collection && collection.scope !== scope) throw badField('collection', `The collection is in scope ${collection.scope}, not ${scope}`);
    const placement = placementFor(auth, scope, scope === 'personal' ? null : (input.institution ?? this.defaultInstitution(auth, scope, collection)));
    if (collection && !samePlace(collection, { scope, ownerUserId: auth.userId, ...placement })) {
      throw badField('collection', 'The collection belongs to another institution or account than the file');
    }
    if (placement.institutionId) {
      const institution = await repo.findInstitutionLimits(db, placement.institutionId, { lock: options.lock });
      if (!institution) throw notFound('Institution');
      assertMayUploadTo(auth, institution);
      const count = await repo.countInstitutionUploads(db, institution.id);
      if (count >= institution.maxFiles) {
        throw forbidden(`This institution has reached its limit of ${institution.maxFiles} files (maxFiles): delete files or ask an administrator to raise the limit`);
      }
    }
    if (scope === 'personal') await this.checkPersonalQuota(db, auth, options);
    return { scope, ...placement, collection };
  }

  /**
   * PERSONAL_MAX_FILES and PERSONAL_MAX_BYTES per user, over the personal files not deleted (processing
   * and error included: they hold storage). Before the bytes are stored the size is unknown: refused
   * only when nothing fits any more. In the write transaction the user's row is locked first, so that
   * concurrent uploads of one user are counted one at a time.
   */
  private async checkPersonalQuota(db: DbOrTx, auth: AuthContext, options: { lock: boolean; size?: number }): Promise<void> {
    const { personalMaxFiles, personalMaxBytes } = this.ctx.config;
    const usage = await repo.personalUsage(db, auth.userId, { lock: options.lock });
    if (usage.files + 1 > personalMaxFiles) {
      throw quotaExceeded(`Your personal vault holds ${usage.files} files, its limit (PERSONAL_MAX_FILES) is ${personalMaxFiles}: delete files to upload more`, 'files', usage.files, personalMaxFiles);
    }
    const size = options.size ?? 1;
    if (usage.bytes + size > personalMaxBytes) {
      throw quotaExceeded(
        `Your personal vault holds ${usage.bytes} bytes; with this file it would exceed its limit (PERSONAL_MAX_BYTES) of ${personalMaxBytes} bytes: delete files to upload more`,
        'bytes',
        usage.bytes,
        personalMaxBytes,
      );
    }
  }

  private parseForm(f: Partial<Record<FormField, string>>): ParsedForm {
    for (const field of FORM_FIELDS) {
      if (f[field]?.includes('\u0000')) throw badField(field, `${field} contains a NUL character`);
    }
    const blank = (v: string | undefined) => (v === undefined || v.trim() === '' ? undefined : v.trim());
    const scope = blank(f.scope);
    if (scope !== undefined && !(VAULT_SCOPES as readonly string[]).includes(scope)) throw badField('scope', `scope must be one of ${VAULT_SCOPES.join(', ')}`);
    const institution = blank(f.institution);
    if (institution !== undefined && !isUuid(institution)) throw badField('institution', 'institution must be an institution id');
    let collection = blank(f.collection);
    if (collection === 'root' || collection === 'null') collection = undefined;
    if (collection !== undefined && !isUuid(collection)) throw badField('collection', 'collection must be a collection id, or "root"');
    const title = f.file_title === undefined ? undefined : visibleText(f.file_title);
    if (title !== undefined && title.length > 500) throw badField('file_title', 'file_title must have at most 500 characters');
    return {
      scope: scope as VaultScope | undefined,
      institution,
      collection,
      file_title: title || undefined,
      is_private: parseBoolean('is_private', f.is_private),
      confidential: parseBoolean('confidential', f.confidential),
    };
  }

  /**
   * Institution of a new instance/account file when none is given: the collection's (instance), else
   * the current one; for account files one of the caller's institutions in the collection's account.
   */
  private defaultInstitution(auth: AuthContext, scope: VaultScope, collection?: CollectionRef): string | null {
    if (!collection) return auth.institutionId;
    if (scope === 'instance') return collection.institutionId;
    if (auth.institutionId && auth.memberships.get(auth.institutionId)?.accountId === collection.accountId) return auth.institutionId;
    for (const [institutionId, m] of auth.memberships) if (m.accountId === collection.accountId) return institutionId;
    return auth.institutionId;
  }

  // ───────────── read ─────────────

  /**
   * Without `scope`: your personal files plus, for the institution given (or your current one), its
   * instance files and its account's shared files. With `scope` instance/account: that scope of the
   * institution given or current (every institution of yours when you have none). Deleted files only
   * with status=deleted.
   */
  async list(auth: AuthContext, q: ListUploadsInput) {
    const { page, pageSize, limit, offset } = pageWindow(q);
    const filters: UploadListFilters = { scope: q.scope };
    const institutionId = q.institution ?? auth.institutionId ?? undefined;
    if (q.scope !== 'personal' && institutionId) {
      const membership = assertMemberOf(auth, institutionId);
      filters.institutionId = institutionId;
      filters.accountId = membership.accountId;
    }
    if (!q.scope && !filters.institutionId) filters.scope = 'personal';
    if (q.collection === 'root') filters.collectionId = null;
    else if (q.collection) filters.collectionId = q.collection;
    filters.status = q.status;
    const fileName = fileNameTerm(q.fileNameSearch);
    if (fileName !== undefined) filters.fileNameSearch = fileName;
    const { rows, total } = await repo.listVisibleUploads(this.ctx.db, auth, filters, limit, offset);
    return { rows, total, page, pageSize };
  }

  /** Visible (the policy's SQL condition) or 404: never a hint that a file of another tenant exists. */
  async get(auth: AuthContext, id: string): Promise<UploadRow> {
    const row = await repo.findVisibleUpload(this.ctx.db, auth, id);
    if (!row) throw notFound('File');
    return row;
  }

  async download(auth: AuthContext, id: string): Promise<{ upload: UploadRow; stream: Readable }> {
    const upload = await this.get(auth, id);
    if (upload.status === 'deleted') throw notFound('File');
    try {
      return { upload, stream: await this.storage.get(upload.storageKey) };
    } catch (err) {
      if (err instanceof BlobNotFoundError) {
        this.ctx.log.error({ uploadId: id, key: upload.storageKey }, 'stored file missing');
        throw notFound('Stored file');
      }
      throw err;
    }
  }

  // ───────────── update, delete ─────────────

  async update(auth: AuthContext, id: string, input: PatchUploadInput): Promise<UploadRow> {
    const now = this.ctx.clock.now();
    return this.ctx.db.transaction(async (tx) => {
      // locked: a concurrent DELETE (or another PATCH) of this file waits, and this one sees its result
      const current = await repo.findVisibleUpload(tx, auth, id, { lock: true });
      if (!current) throw notFound('File');
      assertModify(auth, current, 'Only the owner or a vault administrator may change this file');
      if (current.status === 'deleted') throw conflict('The file is deleted');
      if (input.is_private !== undefined && input.is_private !== current.isPrivate) assertPrivacyChange(auth, current);
      if (input.status !== undefined && input.status !== current.status && !MUTABLE_STATUSES.includes(current.status)) {
        throw conflict(
          current.status === 'processing'
            ? 'The file is still being processed; its status can change once ingestion has finished'
            : `The file is in status ${current.status}; only active, inactive and selected files can change status`,
        );
      }
      let collectionId: string | null | undefined;
      if (input.collection === null) collectionId = null;
      else if (input.collection !== undefined) {
        // share-locked: a concurrent delete of the collection waits for this move (then moves the file
        // on), or has happened and the collection is not found
        const collection = await findVisibleCollection(tx, auth, input.collection, { lock: 'share' });
        if (!collection) throw notFound('Collection');
        if (!samePlace(collection, current)) {
          throw badField('collection', 'The collection must be in the same scope and institution (or account) as the file');
        }
        collectionId = collection.id;
      }
      const patch: Partial<repo.NewUpload> = {};
      if (input.file_title !== undefined) {
        const title = visibleText(input.file_title);
        if (!title) throw badField('file_title', 'file_title must contain a visible character');
        patch.fileTitle = title;
      }
      if (input.status !== undefined) patch.status = input.status;
      if (collectionId !== undefined) patch.collectionId = collectionId;
      if (input.is_private !== undefined) patch.isPrivate = input.is_private;
      if (input.confidential !== undefined) patch.confidential = input.confidential;
      if (Object.keys(patch).length === 0) return current;
      // guarded as well: never a deleted file, and a status change only from a settled status
      const updated = await repo.updateUpload(tx, id, patch, now, patch.status !== undefined ? { statusIn: MUTABLE_STATUSES } : {});
      if (!updated) throw conflict('The file was deleted or changed status meanwhile; read it again');
      return updated;
    });
  }

  /** Status `deleted`; its chunks leave the index in the same transaction; then the stored bytes go. */
  async remove(auth: AuthContext, id: string): Promise<UploadRow> {
    const now = this.ctx.clock.now();
    const row = await this.ctx.db.transaction(async (tx) => {
      const current = await repo.findVisibleUpload(tx, auth, id, { lock: true });
      if (!current) throw notFound('File');
      assertModify(auth, current, 'Only the owner or a vault administrator may delete this file');
      if (current.status === 'deleted') return current;
      const deleted = await repo.markDeleted(tx, id, now);
      if (!deleted) return (await repo.findVisibleUpload(tx, auth, id)) ?? current; // deleted meanwhile: the same answer
      return deleted;
    });
    await this.storage.delete(row.storageKey).catch((err: unknown) => this.ctx.log.warn({ err, uploadId: id }, 'could not remove the stored file'));
    return row;
  }
}
