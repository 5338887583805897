-- Idempotency keys: the request's fingerprint and the stored result of the one run
-- that committed. Keys compare as exact bytes (see 1_create_fence_tokens).
CREATE TABLE IF NOT EXISTS idempotency_keys (
    idem_key    VARBINARY(200) NOT NULL PRIMARY KEY,
    fingerprint VARCHAR(255) NOT NULL,
    result      LONGBLOB NULL,
    created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    expires_at  DATETIME(6) NULL
) ENGINE = InnoDB
