-- Lets PurgeExpiredKeys find expired idempotency keys without scanning the table.
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at)
