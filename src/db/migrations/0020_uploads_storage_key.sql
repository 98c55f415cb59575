-- The sweep of stored files (vault/orphan-files.ts) asks, a page of storage keys at a time, which of them an upload
-- references: an index lookup per key instead of a scan of uploads per page.
CREATE INDEX "uploads_storage_key_idx" ON "uploads" USING btree ("storage_key");