ALTER TABLE "kg_mentions" RENAME TO "kg_mentions_old";--> statement-breakpoint
ALTER INDEX "kg_mentions_upload_idx" RENAME TO "kg_mentions_old_upload_idx";--> statement-breakpoint
CREATE TABLE "chunk_vectors" (
	"chunk_id" text PRIMARY KEY NOT NULL,
	"upload_id" text NOT NULL,
	"embedding" vector(384) NOT NULL
);
--> statement-breakpoint
CREATE TABLE "chunk_vectors_staged" (
	"chunk_id" text PRIMARY KEY NOT NULL,
	"upload_id" text NOT NULL,
	"embedding" vector(384) NOT NULL
);
--> statement-breakpoint
CREATE TABLE "kg_mentions" (
	"chunk_id" text PRIMARY KEY NOT NULL,
	"upload_id" text NOT NULL,
	"names" text[] NOT NULL,
	"kinds" text[] NOT NULL,
	"tf" integer[] NOT NULL
);
--> statement-breakpoint
-- the vector tables take the dimension of the column they replace (a re-embed may have changed it)
DO $$
DECLARE dims integer;
BEGIN
  SELECT atttypmod INTO dims FROM pg_attribute WHERE attrelid = 'chunks'::regclass AND attname = 'embedding' AND NOT attisdropped;
  IF dims IS NOT NULL AND dims > 0 AND dims <> 384 THEN
    EXECUTE format('ALTER TABLE chunk_vectors ALTER COLUMN embedding TYPE vector(%s)', dims);
    EXECUTE format('ALTER TABLE chunk_vectors_staged ALTER COLUMN embedding TYPE vector(%s)', dims);
  END IF;
END $$;--> statement-breakpoint
INSERT INTO "chunk_vectors" ("chunk_id", "upload_id", "embedding") SELECT "id", "upload_id", "embedding" FROM "chunks" WHERE "embedding" IS NOT NULL;--> statement-breakpoint
INSERT INTO "kg_mentions" ("chunk_id", "upload_id", "names", "kinds", "tf")
  SELECT "chunk_id", min("upload_id"), array_agg("name" ORDER BY "rank", "name"), array_agg("kind" ORDER BY "rank", "name"), array_agg("tf" ORDER BY "rank", "name")
    FROM "kg_mentions_old" GROUP BY "chunk_id";--> statement-breakpoint
ALTER TABLE "chunk_vectors" ADD CONSTRAINT "chunk_vectors_chunk_id_chunks_id_fk" FOREIGN KEY ("chunk_id") REFERENCES "public"."chunks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chunk_vectors_staged" ADD CONSTRAINT "chunk_vectors_staged_chunk_id_chunks_id_fk" FOREIGN KEY ("chunk_id") REFERENCES "public"."chunks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "kg_mentions" ADD CONSTRAINT "kg_mentions_chunk_id_chunks_id_fk" FOREIGN KEY ("chunk_id") REFERENCES "public"."chunks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "chunk_vectors_hnsw" ON "chunk_vectors" USING hnsw ("embedding" vector_cosine_ops);--> statement-breakpoint
CREATE INDEX "chunk_vectors_upload_idx" ON "chunk_vectors" USING btree ("upload_id");--> statement-breakpoint
CREATE INDEX "chunk_vectors_staged_upload_idx" ON "chunk_vectors_staged" USING btree ("upload_id");--> statement-breakpoint
CREATE INDEX "kg_mentions_upload_idx" ON "kg_mentions" USING btree ("upload_id");--> statement-breakpoint
DROP TABLE "kg_mentions_old" CASCADE;--> statement-breakpoint
-- absent after a re-embed that stopped half-way (it drops the index first)
DROP INDEX IF EXISTS "chunks_embedding_hnsw";--> statement-breakpoint
ALTER TABLE "chunks" DROP COLUMN "embedding";
