ALTER TABLE "kg_edges" DROP CONSTRAINT "kg_edges_upload_id_uploads_id_fk";
--> statement-breakpoint
ALTER TABLE "kg_entities" DROP CONSTRAINT "kg_entities_upload_id_uploads_id_fk";
--> statement-breakpoint
-- Graph rows are tens a chunk and a foreign-key check on each cost as much as the row (schema.ts kgEntities):
-- without the constraint, they are deleted with their upload by this trigger, however the upload is deleted
-- (directly, or by the cascade from its account or owner).
CREATE FUNCTION "kg_rows_follow_upload"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "kg_edges" WHERE "upload_id" = OLD."id";
  DELETE FROM "kg_entities" WHERE "upload_id" = OLD."id";
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE TRIGGER "uploads_kg_rows_follow" AFTER DELETE ON "uploads" FOR EACH ROW EXECUTE FUNCTION "kg_rows_follow_upload"();
