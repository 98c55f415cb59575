import { desc, sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import type { DbOrTx } from '../../db/client.js';
import { mailOutbox } from '../../db/schema.js';
import { newId } from '../../shared/ids.js';
import type { MailMessage, MailSender } from './types.js';

export type OutboxRow = typeof mailOutbox.$inferSelect;

export interface OutboxOptions {
  /** Also log the message text (development and test only: it may hold one-time codes). */
  logText: boolean;
}

/**
 * The development outbox, used when SMTP_URL is not set: messages become rows of mail_outbox (shown
 * by GET /api/dev/outbox outside production) and an info log line names recipient and subject.
 */
export function createOutboxSender(db: DbOrTx, log: FastifyBaseLogger, options: OutboxOptions): MailSender {
  return {
    kind: 'outbox',
    async send(message: MailMessage) {
      await insertOutboxMessage(db, message);
      if (options.logText) log.info({ to: message.to, subject: message.subject, text: message.text }, 'mail kept in the development outbox');
      else log.info({ to: message.to, subject: message.subject }, 'mail kept in the outbox (SMTP_URL is not set, nothing was delivered)');
    },
  };
}

export async function insertOutboxMessage(db: DbOrTx, message: MailMessage): Promise<void> {
  await db.insert(mailOutbox).values({ id: newId(), to: message.to, subject: message.subject, text: message.text, html: message.html ?? null });
}

/** Latest messages first, optionally only those to one address (case-insensitive) (ids are UUIDv7, so they break ties of equal timestamps in sending order). */
export async function listOutboxMessages(db: DbOrTx, filter: { to?: string; limit: number }): Promise<OutboxRow[]> {
  const query = db.select().from(mailOutbox);
  const filtered = filter.to ? query.where(sql`lower(${mailOutbox.to}) = lower(${filter.to})`) : query;
  return filtered.orderBy(desc(mailOutbox.createdAt), desc(mailOutbox.id)).limit(filter.limit);
}
