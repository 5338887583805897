-- One high-water fencing token per resource.
CREATE TABLE IF NOT EXISTS fence_tokens (
    resource   VARCHAR(200) NOT NULL PRIMARY KEY,
    token      BIGINT NOT NULL CHECK (token > 0),
    updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
);
