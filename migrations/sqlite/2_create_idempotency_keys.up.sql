-- Idempotency keys: the request's fingerprint and the stored result of the one run
-- that committed, inserted in the same transaction as that run's writes.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    idem_key    VARCHAR(200) NOT NULL PRIMARY KEY,
    fingerprint VARCHAR(255) NOT NULL,
    result      BLOB,
    created_at  TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    expires_at  TIMESTAMP NULL
);
