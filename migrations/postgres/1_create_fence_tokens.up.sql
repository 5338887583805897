-- One high-water fencing token per resource. A fenced transaction raises the row to its
-- token only if no higher one is stored, and holds the row lock to commit.
CREATE TABLE IF NOT EXISTS fence_tokens (
    resource   VARCHAR(200) PRIMARY KEY,
    token      BIGINT NOT NULL CHECK (token > 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP
);
