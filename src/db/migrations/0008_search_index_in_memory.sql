CREATE SEQUENCE "public"."upload_index_version" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1;--> statement-breakpoint
DROP INDEX "kg_edges_a_idx";--> statement-breakpoint
DROP INDEX "kg_edges_b_idx";--> statement-breakpoint
DROP INDEX "kg_entities_name_idx";--> statement-breakpoint
DROP INDEX "kg_entities_name_trgm";--> statement-breakpoint
DROP INDEX "kg_mentions_name_idx";--> statement-breakpoint
ALTER TABLE "upload_index_stats" ADD COLUMN "version" bigint DEFAULT nextval('upload_index_version') NOT NULL;