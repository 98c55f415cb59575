/**
 * INTERIM implementation of the search module's retrieval interface, written by the conversation
 * issue so that Q&A is grounded before the search module lands. It is lexical only: Postgres full
 * text (`websearch_to_tsquery` over `chunks.tsv`, ranked by `ts_rank_cd`) over the chunks of ACTIVE
 * uploads visible to the caller through the vault's one visibility predicate. No dense vectors, no
 * knowledge graph: every hit is `source: 'rag'`. At merge the search module's version of this file
 * (same exported signature) replaces it whole.
 */
import { sql } from 'drizzle-orm';
import type { AppContext } from '../../context.js';
import { rowsOf } from '../../db/client.js';
import { inList } from '../../db/search.js';
import type { AuthContext } from '../identity/auth-context.js';
import { visibleCondition } from '../vault/vault.policy.js';

export interface SearchHit {
  uploadId: string;
  chunkId: string;
  chunkIndex: number;
  text: string;
  snippet: string;
  score: number;
  source: 'rag' | 'kag' | 'fused';
  upload: {
    _id: string;
    originalname: string;
    filesize: number;
    mimetype: string;
    file_title: string;
    institution: string;
    is_private: boolean;
    confidential: boolean;
  };
}

export interface RetrieveOptions {
  limit: number;
  uploadIds?: string[];
  collectionIds?: string[];
  minScore?: number;
}

export interface RetrieveResult {
  results: SearchHit[];
  totalScanned: number;
  uploadCount: number;
  tookMs: number;
}

interface RawHit {
  chunk_id: string;
  upload_id: string;
  chunk_index: number;
  text: string;
  rank: number;
  originalname: string;
  filesize: string | number;
  mimetype: string;
  file_title: string;
  institution_id: string | null;
  is_private: boolean;
  confidential: boolean;
}

const SNIPPET_CHARS = 200;

/** About 200 characters of the text around the first query word it contains. */
function snippetOf(text: string, query: string): string {
  const flat = text.replace(/\s+/gu, ' ').trim();
  if (flat.length <= SNIPPET_CHARS) return flat;
  const lower = flat.toLowerCase();
  const words = query.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) ?? [];
  let at = -1;
  for (const w of words) {
    const i = lower.indexOf(w.length > 5 ? w.slice(0, 5) : w);
    if (i >= 0 && (at < 0 || i < at)) at = i;
  }
  const start = Math.max(0, Math.min(at < 0 ? 0 : at - 60, flat.length - SNIPPET_CHARS));
  return `${start > 0 ? '…' : ''}${flat.slice(start, start + SNIPPET_CHARS).trim()}${start + SNIPPET_CHARS < flat.length ? '…' : ''}`;
}

export async function retrieve(ctx: AppContext, auth: AuthContext, query: string, options: RetrieveOptions): Promise<RetrieveResult> {
  const started = performance.now();
  const limit = Math.max(1, Math.min(100, Math.floor(options.limit)));
  const visible = visibleCondition(auth, 'u', { hasPrivateFlag: true });
  const uploadFilter = options.uploadIds ? sql`and ${inList(sql.raw('u.id'), options.uploadIds)}` : sql``;
  // A collection restricts to its files and those of its sub-collections.
  const collectionFilter = options.collectionIds
    ? sql`and u.collection_id in (
        with recursive tree(id) as (
          select c.id from collections c where ${inList(sql.raw('c.id'), options.collectionIds)}
          union select c.id from collections c join tree t on c.parent_id = t.id
        ) select id from tree)`
    : sql``;
  const scope = sql`u.status = 'active' and ${visible} ${uploadFilter} ${collectionFilter}`;

  const [counted] = await rowsOf<{ n: number }>(ctx.db, sql`select count(*)::int as n from uploads u where ${scope}`);
  const uploadCount = Number(counted?.n ?? 0);
  if (uploadCount === 0 || query.trim() === '') return { results: [], totalScanned: 0, uploadCount, tookMs: performance.now() - started };

  const rows = await rowsOf<RawHit>(
    ctx.db,
    // Any of the words may match (a question rarely has every word in one passage); ranking puts the
    // passages with more of them first. Quoted phrases keep their <-> adjacency.
    sql`with q as (select replace(websearch_to_tsquery('english', ${query})::text, ' & ', ' | ')::tsquery as tsq)
        select c.id as chunk_id, c.upload_id, c.chunk_index, c.text, ts_rank_cd(c.tsv, q.tsq, 32) as rank,
               u.originalname, u.filesize, u.mimetype, u.file_title, u.institution_id, u.is_private, u.confidential
          from q, chunks c join uploads u on u.id = c.upload_id
         where ${scope} and c.tsv @@ q.tsq
         order by rank desc, c.upload_id, c.chunk_index
         limit ${limit}`,
  );
  // ts_rank_cd with normalisation 32 is rank/(rank+1): already in 0..1.
  const scored = rows.map((r) => ({ r, score: Math.round(Number(r.rank) * 10_000) / 10_000 }));
  const kept = options.minScore !== undefined ? scored.filter((s) => s.score >= options.minScore!) : scored;
  const results: SearchHit[] = kept.map(({ r, score }) => ({
    uploadId: r.upload_id,
    chunkId: r.chunk_id,
    chunkIndex: Number(r.chunk_index),
    text: r.text,
    snippet: r.confidential && r.institution_id ? '[confidential]' : snippetOf(r.text, query),
    score,
    source: 'rag',
    upload: {
      _id: r.upload_id,
      originalname: r.originalname,
      filesize: Number(r.filesize),
      mimetype: r.mimetype,
      file_title: r.file_title,
      institution: r.institution_id ?? '',
      is_private: r.is_private,
      confidential: r.confidential,
    },
  }));
  return { results, totalScanned: rows.length, uploadCount, tookMs: performance.now() - started };
}
