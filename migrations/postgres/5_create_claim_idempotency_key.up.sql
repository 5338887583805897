-- claim_idempotency_key inserts an idempotency key for the transaction that will run
-- its request, replacing the stored key if it has expired, or refuses with SQLSTATE
-- FG002 when the key is stored (the caller then reads and replays it). A concurrent
-- transaction holding the same uncommitted key makes the insert wait for it: if that
-- one commits, this one is refused; if it rolls back, this one inserts. pgxfence sends
-- it in the same round trip as BEGIN. p_ttl_us NULL: the key never expires.
CREATE OR REPLACE FUNCTION claim_idempotency_key(p_key VARCHAR, p_fingerprint VARCHAR, p_ttl_us BIGINT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at)
    VALUES (p_key, p_fingerprint, now() + p_ttl_us * INTERVAL '1 microsecond')
    ON CONFLICT (idem_key) DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;
    -- An expired key counts as absent. A concurrent replacer waits on this delete and
    -- then finds nothing to delete: it is refused and replays this one's result.
    DELETE FROM idempotency_keys WHERE idem_key = p_key AND expires_at <= now();
    IF FOUND THEN
        INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at)
        VALUES (p_key, p_fingerprint, now() + p_ttl_us * INTERVAL '1 microsecond');
        RETURN;
    END IF;
    RAISE EXCEPTION 'fencegate: idempotency key % is already stored', p_key USING ERRCODE = 'FG002';
END
$$;
