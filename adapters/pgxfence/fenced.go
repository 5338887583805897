package pgxfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/fencedtx"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/pgsql"
)

// check checks and normalizes g once; one (single-row writes) refuses a set of several.
func (s *Store) check(g fence.Grant, one bool) (*grant.Checked, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if one {
		return grant.CheckOne(g)
	}
	return grant.Check(g)
}

// Fenced is [fence.Store]'s Fenced. On a pool or connection the raise travels with fn's
// first statement (see "The first statement"); on a caller's pgx.Tx it is a savepoint,
// durable when the caller commits. A 40001 that is no refusal is fence.ErrBusy.
func (s *Store) Fenced(ctx context.Context, g fence.Grant, fn func(pgx.Tx) error) (err error) {
	defer s.observe("fenced", &err)
	if fn == nil {
		return fmt.Errorf("%w: nil function", fence.ErrInvalidArgument)
	}
	c, err := s.check(g, false)
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

func (s *Store) fencedConn(ctx context.Context, conn *pgx.Conn, g *grant.Checked, fn func(pgx.Tx) error) (err error) {
	if conn.PgConn().TxStatus() != 'I' {
		// BEGIN would only warn, and the COMMIT would end the caller's transaction.
		return fmt.Errorf("%w: pgxfence: the connection is inside a transaction; give New the pgx.Tx", fence.ErrInvalidArgument)
	}
	forgetReplication(conn)
	t := &lazyTx{ctx: ctx, s: s, conn: conn, g: g}
	if s.fenceFirst { // BEGIN and the raise in one round trip, before fn runs
		if err := t.begin(ctx); err != nil {
			t.rollback(ctx)
			return err
		}
	}
	return s.runLazy(t, fn)
}

func (s *Store) fencedNested(ctx context.Context, g *grant.Checked, fn func(pgx.Tx) error) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgxfence: begin: %w", err)
	}
	q, args := pgsql.Raise(g, "") // a savepoint: the caller's transaction is the caller's to bound
	if _, err := tx.Exec(ctx, q, s.mode(args)...); err != nil {
		if rbErr := tx.Rollback(ctx); rbErr != nil {
			return errors.Join(refusal(ctx, g, err, nil), fmt.Errorf("pgxfence: rollback: %w", rbErr))
		}
		return refusal(ctx, g, err, nil)
	}
	return fencedtx.Run(g, savepoint{ctx, tx, g}, s.fnTx(tx), fn)
}

// savepoint is a fenced savepoint of the caller's pgx.Tx; only the caller's commit lasts.
type savepoint struct {
	ctx context.Context
	tx  pgx.Tx
	g   *grant.Checked
}

func (t savepoint) FnErr(err error) error { return poolerHint(fnErr(t.g, err)) }
func (t savepoint) Refused() error        { return nil }
func (t savepoint) Rollback()             { _ = t.tx.Rollback(t.ctx) } // after a failed release, ErrTxClosed

func (t savepoint) Commit() error {
	if err := t.tx.Commit(t.ctx); err != nil {
		return refusal(t.ctx, t.g, err, nil)
	}
	return nil
}

// runLazy runs fn on t and commits (fencedtx.Run); with WithFenceFirst t has begun.
func (s *Store) runLazy(t *lazyTx, fn func(pgx.Tx) error) error {
	return fencedtx.Run(t.g, lazyRun{t}, pgx.Tx(t), fn)
}

// lazyRun is a lazyTx as the lifecycle ends it (fencedtx.Tx).
type lazyRun struct{ t *lazyTx }

func (r lazyRun) FnErr(err error) error { return poolerHint(fnErr(r.t.g, err)) }
func (r lazyRun) Refused() error        { return r.t.refused }
func (r lazyRun) Rollback()             { r.t.rollback(r.t.ctx) }

func (r lazyRun) Commit() error {
	t, ctx := r.t, r.t.ctx
	if t.tx == nil { // fn sent nothing: the fence is raised all the same
		if err := t.begin(ctx); err != nil {
			return err
		}
	}
	err := commit(ctx, t.tx, t.g)
	if err == nil {
		return replicationErr(t.conn, t.g) // WatchReplication
	}
	if errors.Is(err, fence.ErrCommitUnknown) {
		return err
	}
	return refusal(ctx, t.g, err, t.conn)
}

// lazyTx is the pgx.Tx a pipelined Fenced hands fn. A refusal is remembered: every
// later call returns it, and Fenced returns it even if fn swallowed it.
type lazyTx struct {
	ctx     context.Context // Fenced's: for Conn and LargeObjects, which take none
	s       *Store
	conn    *pgx.Conn
	g       *grant.Checked
	tx      pgx.Tx // nil until the transaction is begun
	refused error  // the fence's refusal, or a failure to begin
}

// batch returns a batch that begins the transaction and raises the fence.
func (t *lazyTx) batch() *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: t.s.beginSQL})
	q, args := pgsql.Raise(t.g, t.s.set.IdleMS(t.g))
	b.Queue(q, args...)
	return b
}

func (t *lazyTx) begin(ctx context.Context) error {
	if t.s.pooler {
		return t.beginPooled(ctx)
	}
	br := t.conn.SendBatch(ctx, t.batch())
	t.tx = br.Tx()
	_, err := br.Exec() // BEGIN
	if err == nil {
		_, err = br.Exec() // the raise
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return t.refuse(ctx, err)
	}
	return nil
}

func (t *lazyTx) ensure(ctx context.Context) error {
	if t.refused != nil {
		return t.refused
	}
	if t.tx == nil {
		return t.begin(ctx)
	}
	return nil
}

// sendFirst sends BEGIN, the raise and fn's statement in one batch and returns it at
// fn's statement, or nil if pgx could not send it (the transaction then began alone).
// After a refused raise the server skips fn's statement (up to Sync, or the string's end).
func (t *lazyTx) sendFirst(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := t.batch()
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil { // BEGIN
		_ = br.Close()
		if !t.conn.IsClosed() && t.conn.PgConn().TxStatus() == 'I' {
			// pgx refused the batch before sending (fn's statement cannot be prepared
			// or encoded): begin alone, so it fails in the transaction as unpipelined.
			t.tx = nil
			return nil, t.begin(ctx)
		}
		return nil, t.refuse(ctx, err)
	}
	if _, err := br.Exec(); err != nil { // the raise, with the idle timeout
		_ = br.Close()
		return nil, t.refuse(ctx, err)
	}
	return br, nil
}

// refuse remembers and returns the refusal of a failed begin or raise. The aborted
// transaction stays open until Fenced ends, so nothing fn sends, even through Conn,
// runs; a 40001 is rolled back at once, to read the stored token on the idle conn.
func (t *lazyTx) refuse(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code != pgsql.Serialization &&
		t.tx != nil && !t.conn.IsClosed() && t.conn.PgConn().TxStatus() == 'E' {
		t.refused = refusal(ctx, t.g, err, nil)
		return t.refused
	}
	var lookup querier
	if t.tx != nil {
		if rbErr := t.tx.Rollback(ctx); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			t.refused = errors.Join(refusal(ctx, t.g, err, nil), fmt.Errorf("pgxfence: rollback: %w", rbErr))
			return t.refused
		}
	}
	if !t.conn.IsClosed() && t.conn.PgConn().TxStatus() == 'I' {
		lookup = t.conn
	}
	t.refused = refusal(ctx, t.g, err, lookup)
	return t.refused
}

func (t *lazyTx) rollback(ctx context.Context) {
	if t.tx != nil {
		_ = t.tx.Rollback(ctx) // ErrTxClosed once ended
	}
}

// ended remembers an error saying the server ended the transaction for idling, so
// Fenced returns fence.ErrIdleTimeout even if fn swallows it.
func (t *lazyTx) ended(err error) error {
	if e := fnErr(t.g, err); e != err {
		t.refused = e
		return e
	}
	return err
}
