import type { FastifyBaseLogger } from 'fastify';
import nodemailer from 'nodemailer';
import type { MailMessage, MailSender } from './types.js';

/**
 * Real mail through SMTP (nodemailer). The whole connection is described by SMTP_URL, including
 * nodemailer's own options as query parameters, e.g. `smtps://user:pass@mail.example.com:465`, or
 * `smtp://127.0.0.1:2525/?ignoreTLS=true` for a plain local relay that offers STARTTLS with a
 * certificate it cannot prove. Timeouts keep a dead mail server from holding a request for minutes.
 */
export function createSmtpSender(smtpUrl: string, from: string, log: FastifyBaseLogger): MailSender {
  const transport = nodemailer.createTransport(
    { url: smtpUrl, connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 30_000 },
    { from },
  );
  return {
    kind: 'smtp',
    async send(message: MailMessage) {
      const info = await transport.sendMail({ to: message.to, subject: message.subject, text: message.text, html: message.html });
      // Never the text: it may hold a one-time code.
      log.info({ to: message.to, subject: message.subject, messageId: info.messageId }, 'mail sent via SMTP');
    },
    async close() {
      transport.close();
    },
  };
}
