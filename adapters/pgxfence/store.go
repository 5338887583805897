// Package pgxfence makes writes to PostgreSQL conditional on a fencing token, through
// pgx v5, so a stale lock holder is refused by the database, where the data lands. It
// needs the migrations package's tables (migrations.Up(ctx, db, migrations.Postgres)).
//
// Fenced (and fence.Exec) runs a function in a transaction that raises the resource's
// row in fence_tokens to the grant's token, as the fence package doc says; Update,
// Upsert and Delete write one row of a table with a token column in one statement.
//
// # The first statement
//
// On a *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn, fn runs at once with a pgx.Tx whose
// transaction begins with fn's first Exec, Query or QueryRow: one pgx batch carries
// BEGIN, the fence raise and that statement, so a fenced transaction with one write
// takes two round trips (this one and COMMIT) where pgx.BeginFunc takes three. A
// refused raise fails before that statement in the same batch, and PostgreSQL skips
// the rest: the statement never lands. fn gets the *fence.StaleError from it (from
// Exec, from Query and the rows' Err, from QueryRow's Scan), and every later call
// returns it too. Any other first call (SendBatch, CopyFrom, Prepare, Begin, Commit,
// Rollback, LargeObjects, Conn) begins the transaction first, BEGIN and raise in one
// round trip; a fn that sends nothing still raises the fence and commits.
//
// Until its first statement fn holds nothing: work it does outside the database
// before then runs even for a stale grant, and a stale transaction is not held back
// by a newer one that has not sent its first statement (the stale one then commits
// first: tokens still rise in commit order). WithFenceFirst raises the fence before
// fn runs. A first statement whose first argument is a pgx.QueryExecMode or a
// result-format option goes after BEGIN and the raise (one round trip more); a tracer
// sees the pipelined first statement as a batch.
//
// Under REPEATABLE READ or SERIALIZABLE a concurrent raise surfaces as a
// serialization failure (40001): a *fence.StaleError when a higher token is stored by
// the time Fenced looks, otherwise fence.ErrBusy. A lost COMMIT reply is never
// retried; a pool discards the connection.
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

// DB is what a Store writes through, told apart by type, never guessed: a
// *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn (not inside a transaction) gets fenced
// transactions of its own; a caller's pgx.Tx gets them as savepoints inside it. New
// refuses any other type with fence.ErrInvalidArgument.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store runs fenced transactions (fence.Store[pgx.Tx]) and single-row writes on
// PostgreSQL. It is safe for concurrent use when its DB is (a *pgxpool.Pool is; a
// *pgx.Conn or pgx.Tx is not).
type Store struct {
	db         DB
	beginSQL   string                  // "BEGIN ISOLATION LEVEL ...", without the fence
	nested     bool                    // db is a pgx.Tx: savepoints inside it
	fenceFirst bool                    // WithFenceFirst
	shapes     engine.ShapeMap[string] // SQL by shape (rows.go)
	set        engine.Settings         // WithIdleTimeout, WithObserver, WithKeyTTL
}

var _ fence.Store[pgx.Tx] = (*Store)(nil)

// Option configures a Store; see New.
type Option func(*Store) error

// WithTxOptions sets the isolation level of the transactions Fenced and Once begin
// on a pool or connection; every level is fenced (see "The first statement" for
// 40001). Read-only, a BeginQuery or CommitQuery (they would replace the fence),
// unknown values and options on a pgx.Tx are refused (fence.ErrInvalidArgument).
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

// WithIdleTimeout bounds how long a fenced transaction on a pool or connection may
// sit idle on the server before it is ended (idle_in_transaction_session_timeout, for
// that transaction only); the default is the grant's lease (fence.Leased), else 10 s.
// Under a millisecond is refused. Savepoints of a caller's pgx.Tx set nothing.
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error {
		return s.set.SetIdleTimeout("pgxfence", d)
	}
}

// New returns a Store writing through db; it does no I/O. A nil db, a db of no
// supported type (see DB) and an unusable option (named in the error) are
// fence.ErrInvalidArgument; a nil Option is ignored.
func New(db DB, opts ...Option) (*Store, error) {
	if engine.IsNil(db) {
		return nil, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	s := &Store{db: db, beginSQL: "BEGIN"}
	switch db.(type) {
	case *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn:
	case pgx.Tx:
		s.nested = true
	default: // a wrapper around a pool would otherwise get savepoints it did not ask for
		return nil, fmt.Errorf("%w: pgxfence: a %T is neither a *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn nor a pgx.Tx", fence.ErrInvalidArgument, db)
	}
	if err := engine.Apply(s, opts); err != nil {
		return nil, err
	}
	return s, nil
}

func optionErr(option, format string, args ...any) error {
	return fmt.Errorf("pgxfence: %s: %s: %w", option, fmt.Sprintf(format, args...), fence.ErrInvalidArgument)
}

// WithObserver reports every fenced write's result to obs as adapter "pgxfence".
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error {
		s.set.Obs = obs
		return nil
	}
}

// usable refuses a Store with no DB, before any I/O.
func (s *Store) usable() error {
	if s == nil || s.db == nil {
		return fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	return nil
}

func (s *Store) observe(op string, errp *error) {
	if s != nil {
		s.set.Observe("pgxfence", op, errp)
	}
}

// WithFenceFirst makes Fenced raise the fence (BEGIN and the raise in one message)
// before fn runs: three round trips for one write, as pgx.BeginFunc, where the default
// takes two. Use it when fn's work before its first statement must not happen for a
// stale grant, or a stale transaction must wait for a newer one that has not yet sent
// a statement. Savepoints of a caller's pgx.Tx always raise first.
func WithFenceFirst() Option {
	return func(s *Store) error {
		s.fenceFirst = true
		return nil
	}
}
