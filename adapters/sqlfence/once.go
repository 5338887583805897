package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// The idempotency-key statements, with ? placeholders; the ones that differ are the
// database's (claimKeySQL, readKeySQL, purgeKeysSQL). The database's clock decides
// expiry, so clients with skewed clocks agree.

// claimKeyCols starts every claimKeySQL. Its arguments: key, fingerprint, and the
// time-to-live of ttlArg (NULL: never expires).
const claimKeyCols = "INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at) VALUES (?, ?, "

// readKeyQuery reads a stored key and whether it has expired.
func readKeyQuery(d database) string {
	return "SELECT fingerprint, result, CASE WHEN expires_at <= " + d.now() + " THEN 1 ELSE 0 END FROM idempotency_keys WHERE idem_key = ?"
}

// ttlMicros is a time-to-live in microseconds, or NULL: never expires.
func ttlMicros(ttl time.Duration) any {
	if ttl <= 0 {
		return nil
	}
	return ttl.Microseconds()
}

// Once runs fn at most once per idempotency key, as nolock's package doc says, in a
// transaction at the Store's isolation level (WithTxOptions). A duplicate waits on
// the first call's uncommitted key (InnoDB, PostgreSQL) or for SQLite's write lock.
// A deadlock or lock wait timeout, a serialization failure or a busy SQLite met
// before fn runs starts the call over, up to 10 times within ctx; fence.ErrBusy when
// no retry is left or the lock was met after fn ran (nothing was written: run the
// call again). Other failures wrap the driver's error.
func (s *Store) Once(ctx context.Context, key, fingerprint string, fn func(*sql.Tx) ([]byte, error)) (nolock.Result, error) {
	if err := s.usable(); err != nil {
		return nolock.Result{}, err
	}
	if fn == nil {
		return nolock.Result{}, fmt.Errorf("%w: nil function", fence.ErrInvalidArgument)
	}
	if err := engine.CheckIdemKey(key, fingerprint); err != nil {
		return nolock.Result{}, err
	}
	wait := time.Millisecond
	for attempt := 1; ; attempt++ {
		r, stage, err := s.onceAttempt(ctx, key, fingerprint, s.d.ttlArg(s.set.KeyTTL), fn)
		switch {
		case err == nil || stage == fnFailed || !s.d.busy(err) || errors.Is(err, fence.ErrBusy):
			return r, err
		case stage == fnRan || attempt == engine.MaxOnceAttempts:
			return r, fmt.Errorf("%w: once %q, nothing was written: %w", fence.ErrBusy, key, err)
		}
		if cause := engine.Pause(ctx, &wait, 50*time.Millisecond); cause != nil {
			return nolock.Result{}, fmt.Errorf("%w: once %q: %w; last error: %w", fence.ErrBusy, key, cause, err)
		}
	}
}

// PurgeExpiredKeys deletes the idempotency keys whose expiry has passed (keys stored
// without WithKeyTTL never expire) and returns how many it deleted. It deletes in batches
// of 1,000, each its own statement, until none is left or ctx ends; a purge cut short
// has deleted what it reports. Schedule it as often as the table's growth calls for.
//
// Errors: fence.ErrInvalidArgument for a nil Store or an unknown dialect, fence.ErrBusy when
// the database stayed locked until ctx ended, or the driver's error wrapped.
func (s *Store) PurgeExpiredKeys(ctx context.Context) (int64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	var total int64
	q := s.d.purgeKeysSQL()
	for {
		var n int64
		err := s.retry(ctx, func() error {
			res, err := s.db.ExecContext(ctx, q, engine.PurgeBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, s.keyErr("purge expired idempotency keys", err)
		}
		total += n
		if n < engine.PurgeBatch {
			return total, nil
		}
	}
}

// How far an attempt of Once got: once fn has been called Once never starts over,
// since fn may have done more than write; fn's own error is returned as it is.
type onceStage int

const (
	beforeFn onceStage = iota
	fnFailed
	fnRan
)

// onceAttempt is one transaction of Once.
func (s *Store) onceAttempt(ctx context.Context, key, fingerprint string, ttl any, fn func(*sql.Tx) ([]byte, error)) (r nolock.Result, stage onceStage, err error) {
	tx, err := s.db.BeginTx(ctx, s.txOpts)
	if err != nil {
		return nolock.Result{}, beforeFn, s.keyErr("once: begin", err)
	}
	done := false
	defer func() {
		if !done {
			tx.Rollback() // fn panicked; the panic goes on
		}
	}()
	end := func(r nolock.Result, stage onceStage, err error) (nolock.Result, onceStage, error) {
		done = true
		tx.Rollback() // nothing to keep, or fn failed
		return r, stage, err
	}

	r, mine, err := s.claimKey(ctx, tx, key, fingerprint, ttl)
	if err != nil || !mine {
		return end(r, beforeFn, err)
	}

	val, err := fn(tx)
	if err != nil {
		return end(nolock.Result{}, fnFailed, err)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind("UPDATE idempotency_keys SET result = ? WHERE idem_key = ?"), val, key); err != nil {
		return end(nolock.Result{}, fnRan, s.keyErr("once: store result", err))
	}
	done = true
	if err := tx.Commit(); err != nil {
		return nolock.Result{}, fnRan, s.commitErr(ctx, err)
	}
	return nolock.Result{Value: val}, fnRan, nil
}

// claimKey inserts key in tx, the first step of an attempt of Once. mine reports
// that the key is now this transaction's, so fn is to run; otherwise r is the
// stored result (a replay) or err says why not: nolock.ErrKeyReused, or the
// claim's failure.
func (s *Store) claimKey(ctx context.Context, tx *sql.Tx, key, fingerprint string, ttl any) (r nolock.Result, mine bool, err error) {
	var (
		expired  int64 // 1: the stored key has expired
		storedFP string
		stored   []byte
	)
	for try := 1; ; try++ {
		if mine, err = s.claim(ctx, tx, key, fingerprint, ttl); err != nil {
			return r, false, s.keyErr("once: claim key", err)
		}
		if mine {
			return r, true, nil
		}
		err := tx.QueryRowContext(ctx, s.d.readKeySQL(), key).Scan(&storedFP, &stored, &expired)
		if errors.Is(err, sql.ErrNoRows) && try < engine.MaxClaimTries {
			continue // deleted in between (purged, or replaced as expired): claim again
		}
		if err != nil {
			return r, false, s.keyErr("once: read key", err)
		}
		if expired == 0 || try == engine.MaxClaimTries {
			break
		}
		// An expired key counts as absent: drop it and claim it as new.
		if _, err := tx.ExecContext(ctx, s.d.rebind("DELETE FROM idempotency_keys WHERE idem_key = ? AND expires_at <= "+s.d.now()), key); err != nil {
			return r, false, s.keyErr("once: drop expired key", err)
		}
	}
	switch {
	case expired != 0:
		return r, false, fmt.Errorf("sqlfence: once %q: the expired key was replaced concurrently %d times", key, engine.MaxClaimTries)
	case storedFP != fingerprint:
		return r, false, fmt.Errorf("%w: key %q", nolock.ErrKeyReused, key)
	}
	return nolock.Result{Value: stored, Replayed: true}, false, nil
}

// claim inserts the key in tx; false means it is already stored.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, key, fingerprint string, ttl any) (bool, error) {
	res, err := tx.ExecContext(ctx, s.d.claimKeySQL(), key, fingerprint, ttl)
	if err != nil {
		if s.d.claimed(err) {
			return false, nil
		}
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
