DROP INDEX IF EXISTS idempotency_keys_expires_at;
