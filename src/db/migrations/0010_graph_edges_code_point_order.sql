-- Before 0009, kg_edges stored each pair (a, b) with a < b in the database's collation; since 0009 a pair
-- is in code point order (collate "C"), as graph.ts computes it. On a database whose collation is not C
-- (PGlite's is C, PostgreSQL's often en_US), a pair of the old order that a chunk edit recomputed is then
-- held both ways and counted twice. Every pair is put in code point order; a pair held both ways keeps the
-- row in code point order (the one recomputed from all the file's mentions).
DELETE FROM "kg_edges" e
 WHERE e."a" > e."b" COLLATE "C"
   AND EXISTS (SELECT 1 FROM "kg_edges" f WHERE f."upload_id" = e."upload_id" AND f."a" = e."b" AND f."b" = e."a");--> statement-breakpoint
UPDATE "kg_edges" SET "a" = "b", "b" = "a" WHERE "a" > "b" COLLATE "C";
