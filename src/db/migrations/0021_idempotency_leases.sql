-- A running idempotency claim becomes a lease its holder renews while it runs (platform/idempotency.ts): a claim
-- whose holder went silent (its process died) is taken over by a retry once the lease lapses, instead of after
-- the fixed stale age. Claims already running (no holder, no lease) keep the old bound: 2 hours from their claim.
ALTER TABLE "idempotency_keys" ADD COLUMN "holder" text;--> statement-breakpoint
ALTER TABLE "idempotency_keys" ADD COLUMN "lease_until" timestamp with time zone;