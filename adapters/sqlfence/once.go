package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/nolockpath"
	"github.com/fencegate/fencegate/nolock"
)

// keySQL is a Store's idempotency-key statements, built once by New (keyStmts). The
// database's clock decides expiry, so clients with skewed clocks agree.
type keySQL struct{ claim, read, purge, drop, store string }

// claimKeyCols starts every claim. Its arguments: key, fingerprint, and ttlArg's
// time-to-live (NULL: never expires).
const claimKeyCols = "INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at) VALUES (?, ?, "

// readKeyQuery reads a stored key and whether it has expired.
func readKeyQuery(d database) string {
	return "SELECT fingerprint, result, CASE WHEN expires_at <= " + d.now() + " THEN 1 ELSE 0 END FROM idempotency_keys WHERE idem_key = ?"
}

func keyStmts(d database) keySQL {
	k := d.keySQL()
	k.drop = d.rebind("DELETE FROM idempotency_keys WHERE idem_key = ? AND expires_at <= " + d.now())
	k.store = d.rebind("UPDATE idempotency_keys SET result = ? WHERE idem_key = ?")
	return k
}

func (s *Store) keyErr(op string, err error) error { return s.wrap(err, op, "", "idempotency_keys") }

// Once is nolock's idempotent call (see the nolock package doc), in a transaction at
// the Store's isolation level (WithTxOptions). A duplicate waits on the first call's
// uncommitted key (InnoDB, PostgreSQL) or for SQLite's write lock. A deadlock, lock
// wait timeout, serialization failure or busy SQLite met before fn runs starts the
// call over, up to 10 times within ctx; fence.ErrBusy when no retry is left or the
// lock was met after fn ran (nothing was written: run the call again). Other
// failures wrap the driver's error.
func (s *Store) Once(ctx context.Context, key, fingerprint string, fn func(*sql.Tx) ([]byte, error)) (nolock.Result, error) {
	if err := s.usable(); err != nil {
		return nolock.Result{}, err
	}
	if err := nolockpath.CheckOnce(key, fingerprint, fn == nil); err != nil {
		return nolock.Result{}, err
	}
	wait := time.Millisecond
	for attempt := 1; ; attempt++ {
		r, stage, err := s.onceAttempt(ctx, key, fingerprint, s.d.ttlArg(s.set.KeyTTL), fn)
		switch {
		case err == nil || stage == fnFailed || !s.d.busy(err) || errors.Is(err, fence.ErrBusy):
			return r, err
		case stage == fnRan || attempt == nolockpath.MaxOnceAttempts:
			return r, fmt.Errorf("%w: once %q, nothing was written: %w", fence.ErrBusy, key, err)
		}
		if cause := nolockpath.Pause(ctx, &wait, 50*time.Millisecond); cause != nil {
			return nolock.Result{}, fmt.Errorf("%w: once %q: %w; last error: %w", fence.ErrBusy, key, cause, err)
		}
	}
}

// PurgeExpiredKeys deletes the idempotency keys whose expiry has passed (keys stored
// without WithKeyTTL never expire) and returns how many, in batches of 1,000, each
// its own statement, until none is left or ctx ends; a purge cut short has deleted
// what it reports. Errors: fence.ErrInvalidArgument for a nil Store or an unknown
// dialect, fence.ErrBusy when the database stayed locked until ctx ended, or the
// driver's error wrapped.
func (s *Store) PurgeExpiredKeys(ctx context.Context) (int64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	var total int64
	for {
		var n int64
		err := s.retry(ctx, func() (err error) {
			n, err = affected(s.db.ExecContext(ctx, s.keys.purge, nolockpath.PurgeBatch))
			return err
		})
		if err != nil {
			return total, s.keyErr("purge expired idempotency keys", err)
		}
		if total += n; n < nolockpath.PurgeBatch {
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
func (s *Store) onceAttempt(ctx context.Context, key, fingerprint string, ttl any, fn func(*sql.Tx) ([]byte, error)) (nolock.Result, onceStage, error) {
	tx, err := s.db.BeginTx(ctx, s.txOpts)
	if err != nil {
		return nolock.Result{}, beforeFn, s.keyErr("once: begin", err)
	}
	committing := false
	defer func() {
		if !committing {
			_ = tx.Rollback() // nothing to keep, or fn failed or panicked (the panic goes on)
		}
	}()
	r, mine, err := s.claimKey(ctx, tx, key, fingerprint, ttl)
	if err != nil || !mine {
		return r, beforeFn, err
	}
	val, err := fn(tx)
	if err != nil {
		return nolock.Result{}, fnFailed, err
	}
	if _, err := tx.ExecContext(ctx, s.keys.store, val, key); err != nil {
		return nolock.Result{}, fnRan, s.keyErr("once: store result", err)
	}
	committing = true
	if err := tx.Commit(); err != nil {
		return nolock.Result{}, fnRan, s.commitErr(ctx, err)
	}
	return nolock.Result{Value: val}, fnRan, nil
}

// claimKey inserts key in tx. mine reports that the key is now this transaction's,
// so fn is to run; otherwise r is the stored result (a replay) or err says why not:
// nolock.ErrKeyReused, or the claim's failure.
func (s *Store) claimKey(ctx context.Context, tx *sql.Tx, key, fingerprint string, ttl any) (r nolock.Result, mine bool, err error) {
	var (
		expired  int64 // 1: the stored key has expired
		storedFP string
		stored   []byte
	)
	for try := 1; ; try++ {
		if mine, err = s.claim(ctx, tx, key, fingerprint, ttl); err != nil || mine {
			return r, mine, s.keyErr("once: claim key", err)
		}
		err := tx.QueryRowContext(ctx, s.keys.read, key).Scan(&storedFP, &stored, &expired)
		if errors.Is(err, sql.ErrNoRows) && try < nolockpath.MaxClaimTries {
			continue // deleted in between (purged, or replaced as expired): claim again
		}
		if err != nil {
			return r, false, s.keyErr("once: read key", err)
		}
		if expired == 0 || try == nolockpath.MaxClaimTries {
			break
		}
		// An expired key counts as absent: drop it and claim it as new.
		if _, err := tx.ExecContext(ctx, s.keys.drop, key); err != nil {
			return r, false, s.keyErr("once: drop expired key", err)
		}
	}
	switch {
	case expired != 0:
		return r, false, fmt.Errorf("sqlfence: once %q: the expired key was replaced concurrently %d times", key, nolockpath.MaxClaimTries)
	case storedFP != fingerprint:
		return r, false, fmt.Errorf("%w: key %q", nolock.ErrKeyReused, key)
	}
	return nolock.Result{Value: stored, Replayed: true}, false, nil
}

// claim inserts the key in tx; false means it is stored already.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, key, fingerprint string, ttl any) (bool, error) {
	n, err := affected(tx.ExecContext(ctx, s.keys.claim, key, fingerprint, ttl))
	if err != nil && s.d.claimed(err) {
		return false, nil
	}
	return n > 0, err
}
