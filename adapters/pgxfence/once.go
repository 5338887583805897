package pgxfence

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fence"
)

var (
	_ fence.KeyStore[pgx.Tx] = (*Store)(nil)
	_ fence.KeyStore[pgx.Tx] = (*ExpiringKeys)(nil)
)

const (
	// maxOnceAttempts bounds how often Once starts over when PostgreSQL refuses the
	// key's insert with a serialization failure or a deadlock (before fn has run).
	maxOnceAttempts = 10
	// maxFingerprintLen is the idempotency_keys.fingerprint limit, in characters.
	maxFingerprintLen = 255
	// purgeBatch is how many expired keys one DELETE of PurgeExpiredKeys removes.
	purgeBatch   = 1000
	codeDeadlock = "40P01"
)

// The idempotency-key statements. claim_idempotency_key (migration 5) inserts the
// key, replacing an expired one, or refuses with FG002 when it is stored; a
// concurrent holder of the uncommitted key makes it wait for that transaction's end.
const (
	codeKeyStored = "FG002"
	readKeySQL    = `SELECT fingerprint, result FROM idempotency_keys WHERE idem_key = $1`
	storeKeySQL   = `UPDATE idempotency_keys SET result = $2 WHERE idem_key = $1`
	purgeKeysSQL  = `DELETE FROM idempotency_keys WHERE idem_key IN (SELECT idem_key FROM idempotency_keys WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`
)

// errKeyVanished: the key that refused the claim was gone when read (purged in
// between); Once starts over.
var errKeyVanished = errors.New("pgxfence: the stored idempotency key vanished before it was read")

// Once runs fn at most once per idempotency key (see fence.Once for the contract);
// the key never expires. ExpiringKeys gives keys that do.
//
// In one transaction it first inserts the key with its fingerprint, then runs fn,
// then stores fn's result on the key row and commits: fn's writes and the key
// commit or roll back together. A concurrent call with the same key waits on the
// first one's uncommitted key (PostgreSQL's unique-index wait) and then replays the
// stored result, or, if the first rolled back, runs fn itself. On a pool or
// connection the insert travels with BEGIN, in one round trip; a key already stored
// costs that round trip, a rollback and the read of the stored result, and fn does
// not run. The migrations must include claim_idempotency_key (migration 5).
//
// The transaction uses the Store's isolation level (WithTxOptions). Under
// REPEATABLE READ and SERIALIZABLE a duplicate that waited gets a serialization
// failure; Once then starts over with a new transaction, up to 10 times within ctx,
// and replays. Deadlocks met before fn runs are retried the same way. On a Store
// over a caller's pgx.Tx, Once is a savepoint in it and never retries.
//
// Errors: fence.ErrKeyReused (the key is stored with another fingerprint; nothing
// ran), fence.ErrInvalidArgument (nil store or fn, an empty key or one over
// fence.MaxKeyLen bytes, a key or fingerprint that is not UTF-8 or holds a NUL, a
// fingerprint over 255 characters), fn's own error as is after rolling back fn's
// writes and the key, ErrSerialization when a serialization failure hit fn's work
// or the commit (run the call again), ErrSchema when idempotency_keys is missing,
// or the driver's error wrapped. If fn panics, the transaction is rolled back and
// the panic goes on.
func (s *Store) Once(ctx context.Context, key, fingerprint string, fn func(pgx.Tx) ([]byte, error)) (fence.Result, error) {
	return s.once(ctx, key, fingerprint, 0, fn)
}

// ExpiringKeys are a Store's idempotency keys stored with an expiry: a key counts
// as absent once its time-to-live has passed since it was stored (the database's
// clock decides), so a call with it runs fn again and stores the key anew. Expired
// rows stay in idempotency_keys until Store.PurgeExpiredKeys removes them; schedule
// that call. An ExpiringKeys is safe for concurrent use when its Store is.
type ExpiringKeys struct {
	s   *Store
	ttl time.Duration
}

// ExpiringKeys returns the Store's idempotency keys with time-to-live ttl: use it
// with fence.Once in place of the Store. A ttl under one microsecond (the precision
// stored) returns fence.ErrInvalidArgument.
func (s *Store) ExpiringKeys(ttl time.Duration) (*ExpiringKeys, error) {
	if ttl < time.Microsecond {
		return nil, fmt.Errorf("%w: idempotency key time-to-live %v: want at least 1µs", fence.ErrInvalidArgument, ttl)
	}
	return &ExpiringKeys{s: s, ttl: ttl}, nil
}

// TTL returns the keys' time-to-live.
func (k *ExpiringKeys) TTL() time.Duration { return k.ttl }

// Once is Store.Once for a key that expires TTL after it is stored. A stored key
// that has expired is replaced, whatever its fingerprint.
func (k *ExpiringKeys) Once(ctx context.Context, key, fingerprint string, fn func(pgx.Tx) ([]byte, error)) (fence.Result, error) {
	if k == nil {
		return fence.Result{}, fmt.Errorf("%w: nil ExpiringKeys", fence.ErrInvalidArgument)
	}
	return k.s.once(ctx, key, fingerprint, k.ttl, fn)
}

// PurgeExpiredKeys deletes the idempotency keys whose expiry has passed (keys
// stored by Store.Once never expire) and returns how many it deleted. It deletes in
// batches of 1,000, each its own statement, skipping keys another transaction has
// locked, until none is left or ctx ends; a purge that ctx cut short has deleted what
// it reports. Schedule it as often as the table's growth calls for.
//
// Errors: fence.ErrInvalidArgument for a nil Store, ErrSchema when
// idempotency_keys is missing, or the driver's error wrapped.
func (s *Store) PurgeExpiredKeys(ctx context.Context) (int64, error) {
	if s == nil || s.db == nil {
		return 0, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	var total int64
	for {
		tag, err := s.db.Exec(ctx, purgeKeysSQL, purgeBatch)
		if err != nil {
			return total, keyError("purge expired idempotency keys", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
	}
}

func (s *Store) once(ctx context.Context, key, fingerprint string, ttl time.Duration, fn func(pgx.Tx) ([]byte, error)) (fence.Result, error) {
	if s == nil || s.db == nil {
		return fence.Result{}, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	if fn == nil {
		return fence.Result{}, fmt.Errorf("%w: nil function", fence.ErrInvalidArgument)
	}
	if err := checkKey(key, fingerprint); err != nil {
		return fence.Result{}, err
	}
	var micros *int64
	if ttl > 0 {
		m := ttl.Microseconds()
		micros = &m
	}
	wait := time.Millisecond
	for attempt := 1; ; attempt++ {
		r, ran, err := s.onceAttempt(ctx, key, fingerprint, micros, fn)
		if err == nil || ran || attempt == maxOnceAttempts || !retryable(err) ||
			(s.nested && !errors.Is(err, errKeyVanished)) {
			return r, err
		}
		t := time.NewTimer(wait/2 + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return fence.Result{}, fmt.Errorf("pgxfence: once %q: %w; last error: %w", key, context.Cause(ctx), err)
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// checkKey refuses what idempotency_keys cannot store, before any I/O.
func checkKey(key, fingerprint string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty idempotency key", fence.ErrInvalidArgument)
	case len(key) > fence.MaxKeyLen:
		return fmt.Errorf("%w: idempotency key is %d bytes, the limit is %d", fence.ErrInvalidArgument, len(key), fence.MaxKeyLen)
	case !utf8.ValidString(key) || containsNUL(key):
		return fmt.Errorf("%w: idempotency key %q: PostgreSQL text must be UTF-8 without NUL bytes", fence.ErrInvalidArgument, key)
	case !utf8.ValidString(fingerprint) || containsNUL(fingerprint):
		return fmt.Errorf("%w: fingerprint %q: PostgreSQL text must be UTF-8 without NUL bytes", fence.ErrInvalidArgument, fingerprint)
	case utf8.RuneCountInString(fingerprint) > maxFingerprintLen:
		return fmt.Errorf("%w: fingerprint is %d characters, the limit is %d (store a hash of the request)", fence.ErrInvalidArgument, utf8.RuneCountInString(fingerprint), maxFingerprintLen)
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// onceAttempt is one transaction of Once. ran reports whether fn was called: after
// that Once never starts over, since fn may have done more than write.
func (s *Store) onceAttempt(ctx context.Context, key, fingerprint string, micros *int64, fn func(pgx.Tx) ([]byte, error)) (fence.Result, bool, error) {
	switch db := s.db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return fence.Result{}, false, fmt.Errorf("pgxfence: once: acquire a connection: %w", err)
		}
		defer c.Release()
		return s.onceConn(ctx, c.Conn(), key, fingerprint, micros, fn)
	case *pgxpool.Conn:
		return s.onceConn(ctx, db.Conn(), key, fingerprint, micros, fn)
	case *pgx.Conn:
		return s.onceConn(ctx, db, key, fingerprint, micros, fn)
	}
	return s.onceNested(ctx, key, fingerprint, micros, fn)
}

// onceConn claims the key in the same simple-protocol message as BEGIN (no
// parameters there: the key and fingerprint go as escape-string literals, which
// checkKey has made safe: UTF-8 without NUL bytes).
func (s *Store) onceConn(ctx context.Context, conn *pgx.Conn, key, fingerprint string, micros *int64, fn func(pgx.Tx) ([]byte, error)) (fence.Result, bool, error) {
	ttl := "NULL"
	if micros != nil {
		ttl = strconv.FormatInt(*micros, 10)
	}
	begin := s.beginSQL + "; SELECT claim_idempotency_key(" + literal(key) + ", " + literal(fingerprint) + ", " + ttl + ")"
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: begin})
	if err != nil {
		// A refused claim leaves the transaction open and aborted; pgx hands back no
		// Tx, so end it here (a broken connection is closed by pgx instead). A stored
		// key is read in the same round trip as the rollback.
		if isCode(err, codeKeyStored) && !conn.IsClosed() && conn.PgConn().TxStatus() == 'E' {
			return replayAfterRollback(ctx, conn, key, fingerprint)
		}
		if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			if _, rbErr := conn.Exec(ctx, "ROLLBACK"); rbErr != nil {
				return fence.Result{}, false, errors.Join(keyError("once: claim key", err), fmt.Errorf("pgxfence: rollback: %w", rbErr))
			}
		}
		if isCode(err, codeKeyStored) {
			return replay(ctx, conn, key, fingerprint)
		}
		return fence.Result{}, false, keyError("once: claim key", err)
	}
	return runOnce(ctx, tx, key, fn)
}

// onceNested claims the key in a savepoint of the caller's transaction.
func (s *Store) onceNested(ctx context.Context, key, fingerprint string, micros *int64, fn func(pgx.Tx) ([]byte, error)) (fence.Result, bool, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fence.Result{}, false, keyError("once: begin", err)
	}
	if _, err := tx.Exec(ctx, "SELECT claim_idempotency_key($1, $2, $3)", key, fingerprint, micros); err != nil {
		if rbErr := tx.Rollback(ctx); rbErr != nil {
			return fence.Result{}, false, errors.Join(keyError("once: claim key", err), fmt.Errorf("pgxfence: rollback: %w", rbErr))
		}
		if isCode(err, codeKeyStored) {
			return replay(ctx, s.db, key, fingerprint)
		}
		return fence.Result{}, false, keyError("once: claim key", err)
	}
	return runOnce(ctx, tx, key, fn)
}

// replay reads the stored key that refused the claim: its result, or ErrKeyReused
// for another request's fingerprint.
func replay(ctx context.Context, q querier, key, fingerprint string) (fence.Result, bool, error) {
	var (
		storedFP string
		stored   []byte
	)
	err := q.QueryRow(ctx, readKeySQL, key).Scan(&storedFP, &stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fence.Result{}, false, errKeyVanished
	case err != nil:
		return fence.Result{}, false, keyError("once: read key", err)
	case storedFP != fingerprint:
		return fence.Result{}, false, fmt.Errorf("%w: key %q", fence.ErrKeyReused, key)
	}
	return fence.Result{Value: stored, Replayed: true}, false, nil
}

// replayAfterRollback ends the refused transaction and reads the stored key in one
// simple-protocol message (the key as an escape-string literal, as in the claim);
// the result comes back hex-encoded, whatever the server's bytea_output.
func replayAfterRollback(ctx context.Context, conn *pgx.Conn, key, fingerprint string) (fence.Result, bool, error) {
	results, err := conn.PgConn().Exec(ctx, "ROLLBACK; SELECT fingerprint, encode(result, 'hex') FROM idempotency_keys WHERE idem_key = "+literal(key)).ReadAll()
	if err != nil {
		return fence.Result{}, false, keyError("once: read key", err)
	}
	if len(results) != 2 {
		return fence.Result{}, false, fmt.Errorf("pgxfence: once: read key: %d results, want 2", len(results))
	}
	rows := results[1].Rows
	switch {
	case len(rows) == 0:
		return fence.Result{}, false, errKeyVanished
	case string(rows[0][0]) != fingerprint:
		return fence.Result{}, false, fmt.Errorf("%w: key %q", fence.ErrKeyReused, key)
	}
	var stored []byte
	if rows[0][1] != nil {
		if stored, err = hex.DecodeString(string(rows[0][1])); err != nil {
			return fence.Result{}, false, fmt.Errorf("pgxfence: once: read key: %w", err)
		}
	}
	return fence.Result{Value: stored, Replayed: true}, false, nil
}

// runOnce runs fn in tx, whose claim holds the key, stores the result and commits;
// it rolls back on an error or a panic from fn.
func runOnce(ctx context.Context, tx pgx.Tx, key string, fn func(pgx.Tx) ([]byte, error)) (r fence.Result, ran bool, err error) {
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback(ctx) // fn panicked; the panic goes on
		}
	}()
	val, err := fn(tx)
	if err != nil {
		done = true
		_ = tx.Rollback(ctx)
		return fence.Result{}, true, err
	}
	if _, err := tx.Exec(ctx, storeKeySQL, key, val); err != nil {
		done = true
		_ = tx.Rollback(ctx)
		return fence.Result{}, true, keyError("once: store result", err)
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		_ = tx.Rollback(ctx) // a no-op after a failed commit
		return fence.Result{}, true, keyError("once: commit", err)
	}
	return fence.Result{Value: val}, true, nil
}

func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// retryable reports a refusal that a fresh transaction may not meet.
func retryable(err error) bool {
	return isCode(err, codeSerialization) || isCode(err, codeDeadlock) || errors.Is(err, errKeyVanished)
}

// keyError wraps an error of the idempotency-key statements.
func keyError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeSerialization:
			return fmt.Errorf("%w: %s: %w", ErrSerialization, op, err)
		case codeNoTable, codeNoFunction:
			return fmt.Errorf("%w: %s: %w", ErrSchema, op, err)
		}
	}
	return fmt.Errorf("pgxfence: %s: %w", op, err)
}
