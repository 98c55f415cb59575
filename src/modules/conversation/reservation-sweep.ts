import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../../db/client.js';
import type { Clock } from '../../shared/clock.js';
import { releaseStaleReservations } from './credits.repository.js';
import { deleteExpiredIdempotencyKeys } from '../../platform/idempotency.js';

/**
 * How long a Q&A reservation may go without being settled or renewed before it is released: longer than
 * any request can take (LLM_TIMEOUT_MS is at most 10 minutes a call, and a request makes at most four
 * calls, each renewing it when it grows); a request that outlives it anyway finds it settled and fails.
 */
export const RESERVATION_STALE_MS = 2 * 60 * 60 * 1000;
/** How often each node looks for stale reservations (and once when it starts). */
export const RESERVATION_SWEEP_INTERVAL_MS = 10 * 60 * 1000;

/**
 * Releases the credit reservations of requests that ended without settling them: the process that
 * answered died (a crash, a kill) between the reservation and the payment. Each is released whole, with
 * its ledger row, once (settling deletes the open reservation in the same statement), whichever node
 * finds it first. The same pass deletes idempotency keys older than their 24 hours.
 */
export class ReservationSweep {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: FastifyBaseLogger,
    /** Told the users whose balance a pass gave credits back to (the auth cache drops their cached user rows, on every node). */
    private readonly usersChanged: (userIds: ReadonlySet<string>) => void,
  ) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.run(), RESERVATION_SWEEP_INTERVAL_MS).unref();
    void this.run();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One pass; a pass already running is not started twice. */
  run(): Promise<void> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(): Promise<void> {
    try {
      const now = this.clock.now();
      const before = new Date(now.getTime() - RESERVATION_STALE_MS);
      let released = 0;
      const users = new Set<string>();
      try {
        for (;;) {
          const batch = await releaseStaleReservations(this.db, before, now);
          if (batch.length === 0) break;
          released += batch.length;
          for (const id of batch) users.add(id);
        }
      } finally {
        // what was released stays released if a later batch fails: its users' cached rows go now
        if (users.size > 0) this.usersChanged(users);
      }
      if (released > 0) this.log.warn({ released }, 'released credit reservations of requests that ended without settling them');
    } catch (err) {
      this.log.error({ err }, 'releasing stale credit reservations failed; trying again at the next sweep');
    }
    // idempotency keys past their 24 hours go with the same sweep (whatever happened to the reservations)
    try {
      const now = this.clock.now();
      while ((await deleteExpiredIdempotencyKeys(this.db, now)) > 0);
    } catch (err) {
      this.log.error({ err }, 'deleting expired idempotency keys failed; trying again at the next sweep');
    }
  }
}
