-- fence_raise raises the resource's stored token to p_token, or refuses with SQLSTATE
-- FG001 (DETAIL: the stored token) when a higher one is stored. Either way the fence
-- row stays locked to the end of the transaction. pgxfence sends it in the same round
-- trip as BEGIN; a function keeps its plan cached per connection and gives the refusal
-- a clear message in the server log.
CREATE OR REPLACE FUNCTION fence_raise(p_resource VARCHAR, p_token BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    stored BIGINT;
BEGIN
    INSERT INTO fence_tokens AS f (resource, token) VALUES (p_resource, p_token)
    ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = CURRENT_TIMESTAMP
        WHERE f.token <= EXCLUDED.token
    RETURNING f.token INTO stored;
    IF NOT FOUND THEN
        SELECT f.token INTO stored FROM fence_tokens AS f WHERE f.resource = p_resource;
        RAISE EXCEPTION 'fencegate: stale token % for "%": % already seen', p_token, p_resource, stored
            USING ERRCODE = 'FG001', DETAIL = stored::TEXT;
    END IF;
    RETURN stored;
END
$$;
