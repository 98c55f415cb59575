-- References to collections that no longer exist (possible before these keys) go to the vault root first.
UPDATE "collections" SET "parent_id" = NULL WHERE "parent_id" IS NOT NULL AND "parent_id" NOT IN (SELECT "id" FROM "collections");--> statement-breakpoint
UPDATE "uploads" SET "collection_id" = NULL WHERE "collection_id" IS NOT NULL AND "collection_id" NOT IN (SELECT "id" FROM "collections");--> statement-breakpoint
ALTER TABLE "collections" ADD CONSTRAINT "collections_parent_id_collections_id_fk" FOREIGN KEY ("parent_id") REFERENCES "public"."collections"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "uploads" ADD CONSTRAINT "uploads_collection_id_collections_id_fk" FOREIGN KEY ("collection_id") REFERENCES "public"."collections"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "collections" DROP COLUMN "account_shared";