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
	"errors"
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
	shapes     engine.ShapeMap[string] // SQL by shape (shapes.go)
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
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// optionErr is the error of an option that cannot be used, naming it.
func optionErr(option, format string, args ...any) error {
	return fmt.Errorf("pgxfence: %s: %s: %w", option, fmt.Sprintf(format, args...), fence.ErrInvalidArgument)
}

// checkSingle is check for a single-row write: a fence.Set grant is refused.
func (s *Store) checkSingle(g fence.Grant) (*engine.Checked, error) {
	if s == nil || s.db == nil {
		return nil, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	return engine.CheckOne(g)
}

// check is the door of every fenced write: the grant checked and normalized once.
func (s *Store) check(g fence.Grant) (*engine.Checked, error) {
	c, err := engine.Check(g)
	if err != nil {
		return nil, err
	}
	if s == nil || s.db == nil {
		return nil, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	return c, nil
}

// Fenced runs fn in a transaction fenced for g and commits it, as the fence.Store
// contract says (the fence package doc states it, with its errors). On a pool or
// connection BEGIN and the raise travel with fn's first statement ("The first
// statement" above; WithFenceFirst raises before fn runs); on a caller's pgx.Tx the
// transaction is a savepoint of it, durable only when the caller commits. Besides the
// contract's errors: fence.ErrBusy for a serialization failure that is not a refusal
// (retry the whole transaction), fence.ErrSchema without the migrations.
func (s *Store) Fenced(ctx context.Context, g fence.Grant, fn func(pgx.Tx) error) (err error) {
	defer s.observe("fenced", &err)
	if fn == nil {
		return fmt.Errorf("%w: nil function", fence.ErrInvalidArgument)
	}
	c, err := s.check(g)
	if err != nil {
		return err
	}
	switch db := s.db.(type) {
	case *pgxpool.Pool:
		conn, err := db.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("pgxfence: acquire a connection: %w", err)
		}
		defer conn.Release()
		return s.fencedConn(ctx, conn.Conn(), c, fn)
	case *pgxpool.Conn:
		return s.fencedConn(ctx, db.Conn(), c, fn)
	case *pgx.Conn:
		return s.fencedConn(ctx, db, c, fn)
	}
	return s.fencedNested(ctx, c, fn)
}

func (s *Store) fencedConn(ctx context.Context, conn *pgx.Conn, g *engine.Checked, fn func(pgx.Tx) error) (err error) {
	if conn.PgConn().TxStatus() != 'I' {
		// BEGIN would only warn, and the COMMIT would end the caller's transaction.
		return fmt.Errorf("%w: pgxfence: the connection is inside a transaction; give New the pgx.Tx", fence.ErrInvalidArgument)
	}
	if !s.fenceFirst {
		return s.fencedPipelined(ctx, conn, g, fn)
	}
	// One simple-protocol message: BEGIN and the fence raise. The simple protocol has
	// no parameters, so the resource goes as an escape-string literal (see literal).
	begin := s.beginSQL + "; SET LOCAL idle_in_transaction_session_timeout = " + s.set.IdleMS(g) + "; " + engine.PGRaiseLiteral(g)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: begin})
	if err != nil {
		// A refused raise leaves the transaction open and aborted; pgx hands back
		// no Tx, so end it here (a broken connection is closed by pgx instead).
		if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			if _, rbErr := conn.Exec(ctx, "ROLLBACK"); rbErr != nil {
				return errors.Join(refusal(ctx, g, err, nil), fmt.Errorf("pgxfence: rollback: %w", rbErr))
			}
		}
		return refusal(ctx, g, err, conn)
	}
	return s.runLazy(&lazyTx{ctx: ctx, s: s, conn: conn, g: g, tx: tx}, fn)
}

func (s *Store) fencedNested(ctx context.Context, g *engine.Checked, fn func(pgx.Tx) error) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgxfence: begin: %w", err)
	}
	q, args := engine.PGRaise(g, "") // a savepoint: the caller's transaction is the caller's to bound
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		if rbErr := tx.Rollback(ctx); rbErr != nil {
			return errors.Join(refusal(ctx, g, err, nil), fmt.Errorf("pgxfence: rollback: %w", rbErr))
		}
		return refusal(ctx, g, err, nil)
	}
	return engine.RunTx(g, savepoint{ctx, tx, g}, func() error { return fnErr(g, fn(tx)) })
}

// savepoint is a fenced transaction that is a savepoint of the caller's pgx.Tx: its
// release decides nothing durable, only the caller's commit does.
type savepoint struct {
	ctx context.Context
	tx  pgx.Tx
	g   *engine.Checked
}

func (t savepoint) Refused() error { return nil }
func (t savepoint) Rollback()      { _ = t.tx.Rollback(t.ctx) } // after a failed release, ErrTxClosed

func (t savepoint) Commit() error {
	if err := t.tx.Commit(t.ctx); err != nil {
		return refusal(t.ctx, t.g, err, nil)
	}
	return nil
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
