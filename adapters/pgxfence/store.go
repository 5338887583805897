// Package pgxfence fences writes to PostgreSQL through pgx v5 as the [fence] package
// doc says (Fenced, and the single-row Update, Upsert and Delete), with [nolock]'s
// Once, Decrement and Insert. It needs migrations.Up(ctx, db, migrations.Postgres).
//
// # The first statement
//
// On a pool or connection fn runs at once, with a pgx.Tx whose transaction begins with
// fn's first Exec, Query or QueryRow: one batch carries BEGIN, the raise and that
// statement (two round trips for one write; pgx.BeginFunc takes three). A refused
// raise aborts the batch before the statement, which never lands; that call and every
// later one return the *fence.StaleError (Query also as the rows' Err, QueryRow from
// Scan). Any other first call (SendBatch, CopyFrom, Prepare, Begin, Commit, Rollback,
// LargeObjects, Conn) begins first, BEGIN and raise in one round trip; a fn that sends
// nothing still raises and commits. A first argument that is a pgx.QueryExecMode or
// result format is sent after the raise; a tracer sees a pipelined statement as a batch.
//
// Until its first statement fn holds nothing: work before it runs even for a stale
// grant, and a newer transaction that has sent nothing does not hold a stale one back
// (tokens still rise in commit order). WithFenceFirst raises before fn runs.
//
// Under REPEATABLE READ or SERIALIZABLE a concurrent raise fails with 40001: a
// *fence.StaleError if a higher token is stored by then, else fence.ErrBusy. A lost
// COMMIT reply is never retried; a pool discards the connection.
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
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/fencedtx"
	"github.com/fencegate/fencegate/internal/typednil"
)

// DB is what a Store writes through: a *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn (not
// in a transaction) gets fenced transactions of its own, a caller's pgx.Tx savepoints
// in it. New refuses any other type (fence.ErrInvalidArgument).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is a [fence.Store] of pgx.Tx, with single-row writes. It is safe for concurrent
// use when its DB is (a *pgxpool.Pool is; a *pgx.Conn or pgx.Tx is not).
type Store struct {
	db         DB
	beginSQL   string                   // "BEGIN ISOLATION LEVEL ...", without the fence
	nested     bool                     // db is a pgx.Tx: savepoints inside it
	fenceFirst bool                     // WithFenceFirst
	pooler     bool                     // WithPooler
	ownMode    []any                    // nil, or the exec mode of the Store's statements on a describe_exec DB
	shapes     dialect.ShapeMap[string] // SQL by shape (rows.go)
	set        fencedtx.Settings        // WithIdleTimeout, WithObserver, WithKeyTTL
}

var _ fence.Store[pgx.Tx] = (*Store)(nil)

// Option configures a Store; see New.
type Option func(*Store) error

// WithTxOptions sets the isolation level of Fenced's and Once's transactions; every
// level is fenced (40001: see "The first statement"). Read-only, a BeginQuery or
// CommitQuery, unknown values and any options on a pgx.Tx are fence.ErrInvalidArgument.
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

// WithIdleTimeout bounds how long a fenced transaction may sit idle before the server
// ends it (idle_in_transaction_session_timeout, that transaction only). Default: the
// grant's lease (fence.Leased), else 10 s; under 1 ms is refused; a pgx.Tx sets nothing.
// A statement fn sends through its pgx.Tx (not through Conn or LargeObjects) that meets
// the ended transaction returns fence.ErrIdleTimeout, and so does Fenced, even if fn
// swallowed that error.
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error {
		return s.set.SetIdleTimeout("pgxfence", d)
	}
}

// New returns a Store writing through db; it does no I/O. A nil or unsupported db (see
// DB) or an unusable option is fence.ErrInvalidArgument; a nil Option is ignored.
func New(db DB, opts ...Option) (*Store, error) {
	if typednil.Is(db) {
		return nil, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	s := &Store{db: db, beginSQL: "BEGIN"}
	switch db := db.(type) {
	case *pgxpool.Pool:
		s.ownMode = ownMode(db.Config().ConnConfig)
	case *pgxpool.Conn:
		s.ownMode = ownMode(db.Conn().Config())
	case *pgx.Conn:
		s.ownMode = ownMode(db.Config())
	case pgx.Tx:
		s.nested = true
	default: // a wrapper around a pool would otherwise get savepoints it did not ask for
		return nil, fmt.Errorf("%w: pgxfence: a %T is neither a *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn nor a pgx.Tx", fence.ErrInvalidArgument, db)
	}
	if err := fencedtx.Apply(s, opts); err != nil {
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

// WithFenceFirst makes Fenced raise the fence before fn runs, one round trip more (see
// "The first statement"). Savepoints of a caller's pgx.Tx always raise first.
func WithFenceFirst() Option {
	return func(s *Store) error {
		s.fenceFirst = true
		return nil
	}
}
