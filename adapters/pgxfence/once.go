package pgxfence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/nolockpath"
	"github.com/fencegate/fencegate/internal/pgsql"
	"github.com/fencegate/fencegate/nolock"
)

// claimSQL inserts the key or returns the stored one (arguments: key, fingerprint,
// TTL in microseconds or NULL). After waiting for a concurrent holder of the key that
// committed it returns no row (its snapshot predates the wait): readKeySQL, a new
// statement, sees the row (READ COMMITTED; stricter levels raise 40001 instead).
const (
	claimSQL = `WITH ins AS (
	INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at)
	VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond')
	ON CONFLICT (idem_key) DO NOTHING
	RETURNING 1
)
SELECT true, NULL::varchar, NULL::bytea, false FROM ins
UNION ALL
SELECT false, fingerprint, result, COALESCE(expires_at <= now(), false)
	FROM idempotency_keys WHERE idem_key = $1 AND NOT EXISTS (SELECT 1 FROM ins)`
	readKeySQL   = `SELECT false, fingerprint, result, COALESCE(expires_at <= now(), false) FROM idempotency_keys WHERE idem_key = $1`
	dropKeySQL   = `DELETE FROM idempotency_keys WHERE idem_key = $1 AND expires_at <= now()`
	storeKeySQL  = `UPDATE idempotency_keys SET result = $2 WHERE idem_key = $1`
	purgeKeysSQL = `DELETE FROM idempotency_keys WHERE idem_key IN (SELECT idem_key FROM idempotency_keys WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`
)

// Once runs fn at most once per idempotency key, as nolock's package doc says; a
// duplicate waits on the first call's uncommitted key. A serialization failure or
// deadlock before fn runs starts over, up to 10 times within ctx; one after it is
// fence.ErrBusy (run the call again). On a caller's pgx.Tx, Once is a savepoint in it
// and never starts over.
func (s *Store) Once(ctx context.Context, key, fingerprint string, fn func(pgx.Tx) ([]byte, error)) (nolock.Result, error) {
	if err := s.usable(); err != nil {
		return nolock.Result{}, err
	}
	if err := nolockpath.CheckOnce(key, fingerprint, fn == nil); err != nil {
		return nolock.Result{}, err
	}
	var micros *int64
	if s.set.KeyTTL > 0 {
		m := s.set.KeyTTL.Microseconds()
		micros = &m
	}
	wait := time.Millisecond
	for attempt := 1; ; attempt++ {
		r, ran, err := s.onceAttempt(ctx, key, fingerprint, micros, fn)
		if err == nil || ran || s.nested || attempt == nolockpath.MaxOnceAttempts || !retryable(err) {
			return r, err
		}
		if cause := nolockpath.Pause(ctx, &wait, 50*time.Millisecond); cause != nil {
			return nolock.Result{}, fmt.Errorf("pgxfence: once %q: %w; last error: %w", key, cause, err)
		}
	}
}

// WithKeyTTL makes Once's idempotency keys expire d after they are stored (without
// it they never do); PurgeExpiredKeys deletes them. Under a microsecond is refused.
func WithKeyTTL(d time.Duration) Option {
	return func(s *Store) error {
		return s.set.SetKeyTTL("pgxfence", d)
	}
}

// PurgeExpiredKeys deletes the expired idempotency keys (WithKeyTTL), 1,000 a
// statement, skipping keys another transaction has locked, and returns how many it
// deleted, also when ctx cut it short.
func (s *Store) PurgeExpiredKeys(ctx context.Context) (int64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	var total int64
	for {
		tag, err := s.db.Exec(ctx, purgeKeysSQL, s.mode([]any{nolockpath.PurgeBatch})...)
		if err != nil {
			return total, keyError("purge expired idempotency keys", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < nolockpath.PurgeBatch {
			return total, nil
		}
	}
}

// onceAttempt is one transaction of Once. ran reports that fn was called: Once then
// never starts over, since fn may have done more than write.
func (s *Store) onceAttempt(ctx context.Context, key, fingerprint string, micros *int64, fn func(pgx.Tx) ([]byte, error)) (r nolock.Result, ran bool, err error) {
	tx, err := s.beginOnce(ctx)
	if err != nil {
		return nolock.Result{}, false, keyError("once: begin", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback(ctx) // fn panicked; the panic goes on
		}
	}()
	end := func(r nolock.Result, ran bool, err error) (nolock.Result, bool, error) {
		done = true
		_ = tx.Rollback(ctx) // nothing to keep, or fn failed
		return r, ran, err
	}

	r, mine, err := s.claimKey(ctx, tx, key, fingerprint, micros)
	if err != nil || !mine {
		return end(r, false, err)
	}

	val, err := fn(s.fnTx(tx))
	if err != nil {
		return end(nolock.Result{}, true, poolerHint(err))
	}
	if _, err := tx.Exec(ctx, storeKeySQL, s.mode([]any{key, val})...); err != nil {
		return end(nolock.Result{}, true, keyError("once: store result", err))
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		_ = tx.Rollback(ctx)
		return nolock.Result{}, true, keyError("once: commit", err)
	}
	return nolock.Result{Value: val}, true, nil
}

// claimKey inserts key in tx. mine: the key is this transaction's, fn is to run;
// otherwise r is the stored result (a replay), or err says why not.
func (s *Store) claimKey(ctx context.Context, tx pgx.Tx, key, fingerprint string, micros *int64) (r nolock.Result, mine bool, err error) {
	var (
		expired  bool
		storedFP *string
		stored   []byte
	)
	for try := 1; ; try++ {
		err = tx.QueryRow(ctx, claimSQL, s.mode([]any{key, fingerprint, micros})...).Scan(&mine, &storedFP, &stored, &expired)
		if errors.Is(err, pgx.ErrNoRows) {
			// The insert waited for a concurrent holder of the key, which committed.
			err = tx.QueryRow(ctx, readKeySQL, s.mode([]any{key})...).Scan(&mine, &storedFP, &stored, &expired)
			if errors.Is(err, pgx.ErrNoRows) {
				// Deleted in between (purged or replaced as expired): claim again.
				if try < nolockpath.MaxClaimTries {
					continue
				}
				return r, false, fmt.Errorf("pgxfence: once %q: the key vanished %d times while being read", key, try)
			}
		}
		if err != nil {
			return r, false, keyError("once: claim key", err)
		}
		if !expired || try == nolockpath.MaxClaimTries {
			break
		}
		// An expired key counts as absent: drop it and claim it as new.
		if _, err := tx.Exec(ctx, dropKeySQL, s.mode([]any{key})...); err != nil {
			return r, false, keyError("once: drop expired key", err)
		}
	}
	switch {
	case mine:
		return r, true, nil
	case expired:
		return r, false, fmt.Errorf("pgxfence: once %q: the expired key was replaced concurrently %d times", key, nolockpath.MaxClaimTries)
	case storedFP == nil || *storedFP != fingerprint:
		return r, false, fmt.Errorf("%w: key %q", nolock.ErrKeyReused, key)
	}
	return nolock.Result{Value: stored, Replayed: true}, false, nil
}

// beginOnce begins Once's transaction at the Store's isolation level.
func (s *Store) beginOnce(ctx context.Context) (pgx.Tx, error) {
	type txBeginner interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	}
	if b, ok := s.db.(txBeginner); ok && s.beginSQL != "BEGIN" { // WithTxOptions refuses a pgx.Tx
		return b.BeginTx(ctx, pgx.TxOptions{BeginQuery: s.beginSQL})
	}
	return s.db.Begin(ctx)
}

// retryable reports a refusal a fresh transaction may not meet.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgsql.Serialization || pgErr.Code == pgsql.Deadlock)
}

// keyError wraps an error of the idempotency-key statements.
func keyError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgsql.Serialization:
			return fmt.Errorf("%w: %s: %w", fence.ErrBusy, op, err)
		case pgsql.NoTable:
			return fmt.Errorf("%w: %s: %w", fence.ErrSchema, op, err)
		}
	}
	return fmt.Errorf("pgxfence: %s: %w", op, poolerHint(err))
}
