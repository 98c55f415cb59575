CREATE TABLE "institution_lti_contexts" (
	"context_id" text PRIMARY KEY NOT NULL,
	"institution_id" text NOT NULL
);
--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "previous_refresh_hash" text;--> statement-breakpoint
ALTER TABLE "institution_lti_contexts" ADD CONSTRAINT "institution_lti_contexts_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "institution_lti_contexts_institution_idx" ON "institution_lti_contexts" USING btree ("institution_id");--> statement-breakpoint
-- Context ids already stored: the oldest institution that lists one keeps it; it is removed from the others.
INSERT INTO "institution_lti_contexts" ("context_id", "institution_id")
  SELECT DISTINCT ON (c.ctx) c.ctx, c.id FROM (SELECT i."id", i."created_at", unnest(i."lti_context_ids") AS ctx FROM "institutions" i) c
   ORDER BY c.ctx, c."created_at", c."id"
  ON CONFLICT DO NOTHING;--> statement-breakpoint
UPDATE "institutions" i SET "lti_context_ids" = array(
  SELECT c FROM unnest(i."lti_context_ids") AS c
   WHERE EXISTS (SELECT 1 FROM "institution_lti_contexts" l WHERE l."context_id" = c AND l."institution_id" = i."id"))
 WHERE cardinality(i."lti_context_ids") > 0;
