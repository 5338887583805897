-- Idempotency keys: the request's fingerprint and the stored result of the one run
-- that committed, inserted in the same transaction as that run's writes.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    idem_key    VARCHAR(200) PRIMARY KEY,
    fingerprint VARCHAR(255) NOT NULL,
    result      BYTEA,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    expires_at  TIMESTAMPTZ NULL
);
