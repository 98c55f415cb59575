import { createHash } from 'node:crypto';
import { LruMap } from '../../shared/lru-map.js';
import type { UploadRow } from '../vault/uploads.repository.js';
import type { ScopeUpload, UploadRowSource } from './search.repository.js';

/**
 * The last scope read for each scope condition, so that a search can start ranking before its own
 * scope statement has returned (retrieve.ts, rankLists).
 *
 * This is not a cache that answers in place of the database: every search still sends its scope
 * statement, at the moment it did before, and keeps the lists ranked over the held scope only when that
 * statement returns the same scope (the same uploads with the same index versions and sizes). Otherwise
 * it ranks again over the scope just read. So a search never answers from a scope older than itself, on
 * this node or after a write on another one, with no invalidation message; what the held copy saves is
 * the wait for the statement (about 2.5 ms at the median at 100k chunks, more in the tail), which now
 * runs in the database thread while the graph and lexical sides are scored here.
 *
 * Bounded by keys and by the uploads held across them, the least recently used going first.
 */
export class ScopeCache {
  private readonly held: LruMap<string, readonly ScopeUpload[]>;
  /** Searches that ranked over a held scope which their statement confirmed, that had to rank again, that had none. */
  readonly stats = { confirmed: 0, stale: 0, missed: 0 };

  constructor(limits: { maxKeys: number; maxUploads: number } = { maxKeys: 1_000, maxUploads: 100_000 }) {
    this.held = new LruMap({ maxEntries: limits.maxKeys, maxWeight: limits.maxUploads, weigh: (scope) => scope.length });
  }

  /** The key of a scope condition: its SQL text and parameters, hashed (selected ids can make it long). */
  static keyOf(query: { sql: string; params: unknown[] }): string {
    return createHash('sha256').update(query.sql).update('\0').update(JSON.stringify(query.params)).digest('base64');
  }

  get(key: string): readonly ScopeUpload[] | undefined {
    return this.held.get(key);
  }

  set(key: string, scope: readonly ScopeUpload[]): void {
    this.held.set(key, scope);
  }
}

/** Whether two reads of a scope are the same: the same uploads, in any order, with the same index versions and sizes. */
export function sameScope(a: readonly ScopeUpload[], b: readonly ScopeUpload[]): boolean {
  if (a.length !== b.length) return false;
  const byId = new Map(a.map((s) => [s.id, s]));
  for (const s of b) {
    const o = byId.get(s.id);
    if (o === undefined || o.version !== s.version || o.chunks !== s.chunks || o.lexLen !== s.lexLen) return false;
  }
  return true;
}

/**
 * The rows of the files of recent results, each with the version it was read at (the row's xmin, which
 * every update of the row changes), so that a search need not read its results' files again.
 *
 * Like the held scope, this answers nothing on its own: a search takes a held row only when its own scope
 * statement, sent at the start of this search, reported that same version of the row. A file renamed, made
 * confidential or private, on this node or another, has another version from the next search on, and is read
 * again. A file of the results that the scope did not list (one that entered the scope after its statement) is
 * read. What it saves is the files' statement at the end of a search, the last step before the answer.
 *
 * Bounded by rows, the least recently used going first.
 */
export class UploadRowCache {
  private readonly rows: LruMap<string, { version: string; row: UploadRow }>;
  /** Result files taken from here, and read from the database. */
  readonly stats = { held: 0, read: 0 };

  constructor(maxRows = 10_000) {
    this.rows = new LruMap({ maxEntries: maxRows });
  }

  /** The rows of one search: held ones only at the versions its scope statement read. */
  sourceFor(scope: readonly ScopeUpload[]): UploadRowSource {
    let expected: Map<string, string> | undefined;
    return {
      held: (id) => {
        expected ??= new Map(scope.map((s) => [s.id, s.row]));
        const entry = this.rows.get(id);
        if (entry === undefined || entry.version !== expected.get(id)) {
          this.stats.read++;
          return undefined;
        }
        this.stats.held++;
        return entry.row;
      },
      remember: (row, version) => this.rows.set(row.id, { version, row }),
    };
  }
}
