-- The case-insensitive name searches compare translate(lower(x), 'ς', 'σ') (db/search.ts folded): Postgres lower-cases
-- Σ to σ, never to the final ς, so "ΟΔΟΣ" and "οδος" did not match. The trigram indexes follow the expression.
DROP INDEX "accounts_name_trgm";--> statement-breakpoint
DROP INDEX "uploads_name_trgm";--> statement-breakpoint
CREATE INDEX "accounts_name_trgm" ON "accounts" USING gin (translate(lower("name"), 'ς', 'σ') gin_trgm_ops);--> statement-breakpoint
CREATE INDEX "uploads_name_trgm" ON "uploads" USING gin (translate(lower("originalname"), 'ς', 'σ') gin_trgm_ops);