// PLACEHOLDER, replaced by the MFA work: createMailSender(config, db, log) → SMTP or dev outbox.
import type { FastifyBaseLogger } from 'fastify';
import type { AppConfig } from '../../config.js';
import type { Db } from '../../db/client.js';
import type { MailSender } from './types.js';

export function createMailSender(_config: AppConfig, _db: Db, _log: FastifyBaseLogger): MailSender {
  return {
    kind: 'outbox',
    send: async () => {
      throw new Error('mail not implemented yet');
    },
  };
}
