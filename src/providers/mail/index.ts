import type { FastifyBaseLogger } from 'fastify';
import type { AppConfig } from '../../config.js';
import type { Db } from '../../db/client.js';
import { createOutboxSender } from './outbox.js';
import { createSmtpSender } from './smtp.js';
import type { MailSender } from './types.js';

/** SMTP when SMTP_URL is set; otherwise the development outbox (contract §3). */
export function createMailSender(config: AppConfig, db: Db, log: FastifyBaseLogger): MailSender {
  if (config.smtpUrl) return createSmtpSender(config.smtpUrl, config.mailFrom, log);
  if (config.nodeEnv === 'production') log.warn('SMTP_URL is not set: mail is stored in the mail_outbox table and NOT delivered');
  return createOutboxSender(db, log, { logText: config.nodeEnv !== 'production' });
}
