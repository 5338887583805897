-- Lets PurgeExpiredKeys find expired idempotency keys without scanning the table.
-- Keys without an expiry (NULL) are never purged, so they stay out of the index.
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at ON idempotency_keys (expires_at)
    WHERE expires_at IS NOT NULL;
