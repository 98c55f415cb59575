-- One row per addition to an upload's tokens_used (AI sanitize), written by the statement that adds them; the
-- counter is the sum of its rows. Uploads that counted tokens before this table get one 'opening' row with them.
CREATE TABLE "upload_token_ledger" (
	"id" text PRIMARY KEY NOT NULL,
	"upload_id" text NOT NULL,
	"chunk_id" text,
	"user_id" text,
	"tokens" integer NOT NULL,
	"kind" text NOT NULL,
	"model" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "upload_token_ledger" ADD CONSTRAINT "upload_token_ledger_upload_id_uploads_id_fk" FOREIGN KEY ("upload_id") REFERENCES "public"."uploads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "upload_token_ledger" ADD CONSTRAINT "upload_token_ledger_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "upload_token_ledger_upload_idx" ON "upload_token_ledger" USING btree ("upload_id","created_at");--> statement-breakpoint
INSERT INTO "upload_token_ledger" ("id", "upload_id", "tokens", "kind")
SELECT gen_random_uuid()::text, "id", "tokens_used", 'opening' FROM "uploads" WHERE "tokens_used" > 0;
