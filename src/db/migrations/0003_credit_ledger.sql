CREATE TABLE "credit_awards" (
	"user_id" text NOT NULL,
	"institution_id" text NOT NULL,
	"amount" numeric(20, 4) NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "credit_awards_user_id_institution_id_pk" PRIMARY KEY("user_id","institution_id")
);
--> statement-breakpoint
CREATE TABLE "credit_ledger" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"user_id" text,
	"institution_id" text,
	"delta" numeric(20, 4) NOT NULL,
	"kind" text NOT NULL,
	"actor_user_id" text,
	"ref_id" text,
	"note" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "credit_awards" ADD CONSTRAINT "credit_awards_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_awards" ADD CONSTRAINT "credit_awards_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_ledger" ADD CONSTRAINT "credit_ledger_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_ledger" ADD CONSTRAINT "credit_ledger_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_ledger" ADD CONSTRAINT "credit_ledger_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "credit_ledger_user_idx" ON "credit_ledger" USING btree ("user_id","created_at");--> statement-breakpoint
CREATE INDEX "credit_ledger_institution_idx" ON "credit_ledger" USING btree ("institution_id","created_at");--> statement-breakpoint
CREATE INDEX "credit_ledger_ref_idx" ON "credit_ledger" USING btree ("ref_id");--> statement-breakpoint
ALTER TABLE "credit_ledger" ADD CONSTRAINT "credit_ledger_one_holder" CHECK (("user_id" IS NULL) <> ("institution_id" IS NULL));--> statement-breakpoint
-- Balances that exist when the ledger starts are its opening rows, so that balance = sum(delta) from here on.
INSERT INTO "credit_ledger" ("id", "account_id", "user_id", "delta", "kind", "note")
  SELECT gen_random_uuid()::text, "account_id", "id", "credits", 'opening', 'balance when the ledger was introduced' FROM "users" WHERE "credits" <> 0;--> statement-breakpoint
INSERT INTO "credit_ledger" ("id", "account_id", "institution_id", "delta", "kind", "note")
  SELECT gen_random_uuid()::text, "account_id", "id", "credits", 'opening', 'balance when the ledger was introduced' FROM "institutions" WHERE "credits" <> 0;--> statement-breakpoint
-- Members who already joined an institution that awards credits have had their award: it is not paid again.
INSERT INTO "credit_awards" ("user_id", "institution_id", "amount")
  SELECT m."user_id", m."institution_id", i."credit_award" FROM "memberships" m JOIN "institutions" i ON i."id" = m."institution_id"
   WHERE i."pool_credits" = false AND i."credit_award" > 0
  ON CONFLICT DO NOTHING;
