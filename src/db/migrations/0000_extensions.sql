-- drizzle-kit does not emit extensions; the schema needs pgvector (embeddings) and pg_trgm (name search).
CREATE EXTENSION IF NOT EXISTS vector;
--> statement-breakpoint
CREATE EXTENSION IF NOT EXISTS pg_trgm;
