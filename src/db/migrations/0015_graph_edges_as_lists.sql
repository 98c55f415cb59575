-- Co-occurrence edges as one row per entity a of an upload (its neighbours b and their weights) instead of
-- a row per edge: schema.ts kgEdgeLists. The view kg_edges keeps the one-row-per-edge shape for reading.
CREATE TABLE "kg_edge_lists" (
	"upload_id" text NOT NULL,
	"a" text NOT NULL,
	"bs" text[] NOT NULL,
	"ws" integer[] NOT NULL,
	CONSTRAINT "kg_edge_lists_upload_id_a_pk" PRIMARY KEY("upload_id","a")
);
--> statement-breakpoint
INSERT INTO "kg_edge_lists" ("upload_id", "a", "bs", "ws")
  SELECT "upload_id", "a", array_agg("b" ORDER BY "b" COLLATE "C"), array_agg("weight" ORDER BY "b" COLLATE "C")
    FROM "kg_edges" GROUP BY "upload_id", "a";--> statement-breakpoint
DROP TABLE "kg_edges" CASCADE;--> statement-breakpoint
CREATE VIEW "kg_edges" AS
  SELECT l."upload_id", l."a", e."b", e."weight"
    FROM "kg_edge_lists" l CROSS JOIN LATERAL unnest(l."bs", l."ws") AS e("b", "weight");--> statement-breakpoint
-- graph rows follow their upload (0014), now from the lists
CREATE OR REPLACE FUNCTION "kg_rows_follow_upload"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "kg_edge_lists" WHERE "upload_id" = OLD."id";
  DELETE FROM "kg_entities" WHERE "upload_id" = OLD."id";
  RETURN NULL;
END $$;
