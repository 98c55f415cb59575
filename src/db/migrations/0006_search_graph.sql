CREATE TABLE "kg_edges" (
	"upload_id" text NOT NULL,
	"a" text NOT NULL,
	"b" text NOT NULL,
	"weight" integer NOT NULL,
	CONSTRAINT "kg_edges_upload_id_a_b_pk" PRIMARY KEY("upload_id","a","b")
);
--> statement-breakpoint
CREATE TABLE "kg_entities" (
	"upload_id" text NOT NULL,
	"name" text NOT NULL,
	"kind" text NOT NULL,
	"chunk_count" integer NOT NULL,
	CONSTRAINT "kg_entities_upload_id_name_pk" PRIMARY KEY("upload_id","name")
);
--> statement-breakpoint
CREATE TABLE "kg_mentions" (
	"chunk_id" text NOT NULL,
	"upload_id" text NOT NULL,
	"name" text NOT NULL,
	"kind" text NOT NULL,
	"tf" integer NOT NULL,
	"rank" integer NOT NULL,
	CONSTRAINT "kg_mentions_chunk_id_name_pk" PRIMARY KEY("chunk_id","name")
);
--> statement-breakpoint
CREATE TABLE "upload_index_stats" (
	"upload_id" text PRIMARY KEY NOT NULL,
	"chunks" integer DEFAULT 0 NOT NULL,
	"lex_len" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
ALTER TABLE "chunks" ADD COLUMN "lex_len" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "kg_edges" ADD CONSTRAINT "kg_edges_upload_id_uploads_id_fk" FOREIGN KEY ("upload_id") REFERENCES "public"."uploads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "kg_entities" ADD CONSTRAINT "kg_entities_upload_id_uploads_id_fk" FOREIGN KEY ("upload_id") REFERENCES "public"."uploads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "kg_mentions" ADD CONSTRAINT "kg_mentions_chunk_id_chunks_id_fk" FOREIGN KEY ("chunk_id") REFERENCES "public"."chunks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "kg_mentions" ADD CONSTRAINT "kg_mentions_upload_id_uploads_id_fk" FOREIGN KEY ("upload_id") REFERENCES "public"."uploads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "upload_index_stats" ADD CONSTRAINT "upload_index_stats_upload_id_uploads_id_fk" FOREIGN KEY ("upload_id") REFERENCES "public"."uploads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "kg_edges_a_idx" ON "kg_edges" USING btree ("a");--> statement-breakpoint
CREATE INDEX "kg_edges_b_idx" ON "kg_edges" USING btree ("b");--> statement-breakpoint
CREATE INDEX "kg_entities_name_idx" ON "kg_entities" USING btree ("name");--> statement-breakpoint
CREATE INDEX "kg_entities_name_trgm" ON "kg_entities" USING gin ("name" gin_trgm_ops);--> statement-breakpoint
CREATE INDEX "kg_mentions_name_idx" ON "kg_mentions" USING btree ("name","upload_id");--> statement-breakpoint
CREATE INDEX "kg_mentions_upload_idx" ON "kg_mentions" USING btree ("upload_id");--> statement-breakpoint
-- BM25 statistics of chunks that existed before: lexemes counted with repetition, summed per upload.
UPDATE "chunks" SET "lex_len" = coalesce((SELECT sum(coalesce(array_length(t.positions, 1), 1)) FROM unnest("tsv") t), 0) WHERE "tsv" IS NOT NULL;--> statement-breakpoint
INSERT INTO "upload_index_stats" ("upload_id", "chunks", "lex_len") SELECT "upload_id", count(*), sum("lex_len") FROM "chunks" GROUP BY "upload_id";
