-- One high-water fencing token per resource. VARBINARY compares bytes exactly: a
-- case-insensitive or PAD SPACE collation would let "Account-42" and "account-42 "
-- share one fence row. DATETIME(6) with an explicit default avoids TIMESTAMP's implicit
-- ON UPDATE attribute and its 2038 limit.
CREATE TABLE IF NOT EXISTS fence_tokens (
    resource   VARBINARY(200) NOT NULL PRIMARY KEY,
    token      BIGINT NOT NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT fence_tokens_token_positive CHECK (token > 0)
) ENGINE = InnoDB
