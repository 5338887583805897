// Package pgxfence makes writes to PostgreSQL conditional on a fencing token, through
// pgx v5. A stale lock holder (one that woke from a pause after its lock passed on)
// is refused by the database, where the data lands.
//
// Two mechanisms, both needing the tables of the migrations package
// (migrations.Up(ctx, db, migrations.Postgres)):
//
//   - Fenced (and fence.Exec) runs a function in a transaction that raises the
//     resource's row in fence_tokens to the grant's token, refusing with a
//     *fence.StaleError when a higher token is stored. The row stays locked to
//     commit, so a stale transaction racing a newer one waits and is then refused.
//     BEGIN and the raise go with the function's first statement, in one round trip
//     (one fewer than an unfenced pgx.BeginFunc), and a refused raise stops that
//     statement in the same round trip: PostgreSQL never runs it. With
//     WithFenceFirst they go in a round trip of their own, before the function runs.
//   - Update, Upsert and Delete write one row of a table carrying a fence_token
//     column in one statement, refused when the row (or, for Upsert and Delete, the
//     resource's fence row) holds a higher token.
//
// # The first statement
//
// On a *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn, fn runs at once with a pgx.Tx whose
// transaction begins with fn's first Exec, Query or QueryRow: one pgx batch carries
// BEGIN, the fence raise and that statement, and the raise's result is read before the
// statement's is given to fn. A fenced transaction with one write takes two round trips
// (this one and COMMIT) where pgx.BeginFunc takes three. A refused raise can never let
// that statement land: the raise fails before it in the same batch, PostgreSQL skips
// every later message of the batch, and even a statement run after it would meet an
// aborted transaction. fn gets the *fence.StaleError from that statement (from Exec,
// from Query and the rows' Err, from QueryRow's Scan) and every later call returns it
// too. Any other first call (SendBatch, CopyFrom, Prepare, Begin, Commit, Rollback,
// LargeObjects, Conn) begins the transaction first, BEGIN and raise in one round trip;
// a fn that sends nothing still raises the fence and commits.
//
// From its first statement on, the transaction holds the fence row to commit; before
// it, fn holds nothing: work fn does outside the database before its first statement
// runs even for a stale grant, and a stale transaction is not held back by a newer one
// that has not sent its first statement yet (the stale one then commits first: tokens
// still only rise in commit order). Use WithFenceFirst when that matters. A first
// statement whose first argument is a pgx.QueryExecMode or a result-format option is
// sent after BEGIN and the raise (one round trip more), and a tracer sees the
// pipelined first statement as a batch.
//
// Under REPEATABLE READ or SERIALIZABLE a concurrent fence raise surfaces as a
// serialization failure (40001): Fenced returns it as a *fence.StaleError when a higher
// token is stored by the time it looks, otherwise wrapped with fence.ErrBusy. A lost
// COMMIT reply (the connection broke or closed, the backend was terminated, ctx ended
// while the reply was awaited) is never retried; a pool discards the connection.
//
// A fenced transaction:
//
//	store, err := pgxfence.New(pool)
//	if err != nil { /* a nil pool, an unusable option */ }
//	err = fence.Exec(ctx, store, lock, func(tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `UPDATE invoices SET total = $1 WHERE account = $2`, total, 42)
//		return err
//	})
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop, do not retry */ }
package pgxfence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// DB is what a Store writes through, one of two kinds, told apart by type and never
// guessed: a *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn (not inside a transaction)
// gets fenced transactions of its own, begun with the fence in one round trip; a
// caller's pgx.Tx gets fenced transactions as savepoints inside it. Any other type
// is refused by New with fence.ErrInvalidArgument.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is a PostgreSQL database that runs fenced transactions (fence.Store[pgx.Tx])
// and fenced single-row writes (Update, Upsert, Delete). It is safe for concurrent use when
// its DB is (a *pgxpool.Pool is; a *pgx.Conn or pgx.Tx is not).
type Store struct {
	db       DB
	beginSQL string // "BEGIN ISOLATION LEVEL ...", without the fence
	nested   bool   // db is not a pool or connection: savepoints inside it
	// fenceFirst: BEGIN and the raise in one message before fn runs
	// (WithFenceFirst); otherwise they travel with fn's first statement.
	fenceFirst bool
	shapes     engine.ShapeMap[string] // SQL by shape (ident.go)
	set        engine.Settings         // WithIdleTimeout, WithObserver, WithKeyTTL
}

var (
	_ fence.Store[pgx.Tx] = (*Store)(nil)
)

// Option configures a Store; see New.
type Option func(*Store) error

// WithTxOptions sets the isolation level (and access mode) of the transactions
// Fenced begins on a pool or connection. READ COMMITTED (PostgreSQL's default),
// REPEATABLE READ and SERIALIZABLE are all fenced correctly; see Fenced for what a
// serialization failure returns. Read-only transactions cannot raise a fence and a
// custom BeginQuery or CommitQuery would replace the fence: both are refused, as are
// unknown values and options on a pgx.Tx (New's error wraps fence.ErrInvalidArgument).
func WithTxOptions(o pgx.TxOptions) Option {
	return func(s *Store) error {
		switch o.IsoLevel {
		case "", pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable, pgx.ReadUncommitted:
		default:
			return optionErr("WithTxOptions", "isolation level %q", o.IsoLevel)
		}
		switch o.AccessMode {
		case "", pgx.ReadWrite:
		case pgx.ReadOnly:
			return optionErr("WithTxOptions", "a read-only transaction cannot raise the fence")
		default:
			return optionErr("WithTxOptions", "access mode %q", o.AccessMode)
		}
		switch o.DeferrableMode {
		case "", pgx.NotDeferrable:
		default:
			return optionErr("WithTxOptions", "deferrable mode %q (DEFERRABLE applies to read-only transactions only)", o.DeferrableMode)
		}
		if o.BeginQuery != "" || o.CommitQuery != "" {
			return optionErr("WithTxOptions", "BeginQuery and CommitQuery are not supported: the fence is part of the begin")
		}
		if s.nested {
			return optionErr("WithTxOptions", "on a %T: fenced transactions there are savepoints of the caller's transaction", s.db)
		}
		parts := []string{"BEGIN"}
		if o.IsoLevel != "" {
			parts = append(parts, "ISOLATION LEVEL", strings.ToUpper(string(o.IsoLevel)))
		}
		if o.AccessMode != "" {
			parts = append(parts, strings.ToUpper(string(o.AccessMode)))
		}
		if o.DeferrableMode != "" {
			parts = append(parts, strings.ToUpper(string(o.DeferrableMode)))
		}
		s.beginSQL = strings.Join(parts, " ")
		return nil
	}
}

// WithIdleTimeout sets how long a fenced transaction begun on a pool or connection
// may sit idle on the server (between statements, or before COMMIT) before the server
// ends it: idle_in_transaction_session_timeout, set for that transaction only. The
// default is the grant's lease when it implements fence.Leased, else
// 10 s (the lock service's default lease). A d under a millisecond is
// refused (fence.ErrInvalidArgument). Fenced transactions that are savepoints of a caller's pgx.Tx
// set nothing: the caller's transaction is the caller's to bound.
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error {
		return s.set.SetIdleTimeout("pgxfence", d)
	}
}

// New returns a Store writing through db; it does no I/O. A nil or typed-nil db, a db
// of no supported type (see DB) and an unusable option (named in the error) are
// fence.ErrInvalidArgument. A nil Option is ignored.
func New(db DB, opts ...Option) (*Store, error) {
	if engine.IsNil(db) {
		return nil, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	s := &Store{db: db, beginSQL: "BEGIN"}
	switch db.(type) {
	case *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn:
	case pgx.Tx:
		s.nested = true
	default:
		// Never guess: a wrapper around a pool would otherwise get savepoint
		// semantics it did not ask for.
		return nil, fmt.Errorf("%w: pgxfence: a %T is neither a *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn nor a pgx.Tx", fence.ErrInvalidArgument, db)
	}
	if err := engine.Apply(s, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// optionErr is the error of an option that cannot be used, naming it.
func optionErr(option, format string, args ...any) error {
	return fmt.Errorf("pgxfence: %s: %s: %w", option, fmt.Sprintf(format, args...), fence.ErrInvalidArgument)
}

// WithObserver reports the result of every fenced write (Fenced, Update, Upsert,
// Delete) to obs as adapter "pgxfence" (lockmetrics counts them). nil: none.
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error {
		s.set.Obs = obs
		return nil
	}
}

// observe reports a fenced write's result; deferred by each fenced method.
func (s *Store) observe(op string, errp *error) {
	if s != nil {
		s.set.Observe("pgxfence", op, errp)
	}
}

// WithFenceFirst makes Fenced on a pool or connection raise the fence before fn runs:
// BEGIN and the raise go in one simple-protocol message, and fn is called only once
// the fence holds. A fenced transaction with one write then takes three round trips,
// as many as pgx.BeginFunc, where the default takes two. Use it when fn does work
// outside the database before its first statement that must not happen for a stale
// grant, or when a stale transaction must wait for a newer one that has begun but not
// yet sent a statement. On a Store whose fenced transactions are savepoints of a
// caller's pgx.Tx the fence is always raised first, and the option changes nothing.
func WithFenceFirst() Option {
	return func(s *Store) error {
		s.fenceFirst = true
		return nil
	}
}
