CREATE TABLE "credit_reservations" (
	"ref_id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"user_id" text,
	"institution_id" text,
	"actor_user_id" text NOT NULL,
	"amount" numeric(20, 4) NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "credit_reservations" ADD CONSTRAINT "credit_reservations_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_reservations" ADD CONSTRAINT "credit_reservations_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_reservations" ADD CONSTRAINT "credit_reservations_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "credit_reservations_updated_idx" ON "credit_reservations" USING btree ("updated_at");--> statement-breakpoint
ALTER TABLE "credit_reservations" ADD CONSTRAINT "credit_reservations_one_payer" CHECK (("user_id" IS NULL) <> ("institution_id" IS NULL));--> statement-breakpoint
-- Reservations left open before this table existed (a reserve with no release: the process died during
-- the answer) are recorded, so that the reservation sweep releases them.
INSERT INTO "credit_reservations" ("ref_id", "account_id", "user_id", "institution_id", "actor_user_id", "amount", "created_at", "updated_at")
  SELECT r."ref_id", r."account_id", r."user_id", r."institution_id", max(r."actor_user_id"), -sum(r."delta"), min(r."created_at"), max(r."created_at")
    FROM "credit_ledger" r
   WHERE r."kind" = 'reserve' AND r."ref_id" IS NOT NULL AND r."actor_user_id" IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM "credit_ledger" x WHERE x."ref_id" = r."ref_id" AND x."kind" = 'release')
   GROUP BY r."ref_id", r."account_id", r."user_id", r."institution_id"
  ON CONFLICT ("ref_id") DO NOTHING;
