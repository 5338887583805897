package pgxfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

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

// fencedPipelined is Fenced by default on a pool or connection: fn gets a lazyTx, which begins
// the transaction with fn's first statement.
func (s *Store) fencedPipelined(ctx context.Context, conn *pgx.Conn, g *engine.Checked, fn func(pgx.Tx) error) error {
	return s.runLazy(&lazyTx{ctx: ctx, s: s, conn: conn, g: g}, fn)
}

// runLazy runs fn on t and commits it (fencetx owns the lifecycle); with
// WithFenceFirst t's transaction has begun already.
func (s *Store) runLazy(t *lazyTx, fn func(pgx.Tx) error) error {
	return engine.RunTx(t.g, lazyRun{t}, func() error { return fnErr(t.g, fn(t)) })
}

// lazyRun is a lazyTx as the lifecycle ends it (engine.Tx).
type lazyRun struct{ t *lazyTx }

func (r lazyRun) Refused() error { return r.t.refused }
func (r lazyRun) Rollback()      { r.t.rollback(r.t.ctx) }

func (r lazyRun) Commit() error {
	t, ctx := r.t, r.t.ctx
	if t.tx == nil {
		// fn sent nothing: the fence is raised all the same, so that the stored
		// token moves up to the grant's.
		if err := t.begin(ctx); err != nil {
			return err
		}
	}
	err := commit(ctx, t.tx, t.g)
	if err == nil || errors.Is(err, fence.ErrCommitUnknown) {
		return err
	}
	return refusal(ctx, t.g, err, t.conn)
}

// lazyTx is the pgx.Tx that a pipelined Fenced hands fn. Its transaction begins with
// fn's first Exec, Query or QueryRow: one pgx batch carries BEGIN, the fence raise and
// that statement, and the raise's result is read before the statement's. Any other
// first call begins the transaction (BEGIN and the raise in one round trip) and then
// delegates. A refusal is remembered: every later call returns it, and Fenced rolls
// back and returns it even if fn swallowed it.
type lazyTx struct {
	ctx     context.Context // Fenced's: for Conn and LargeObjects, which take none
	s       *Store
	conn    *pgx.Conn
	g       *engine.Checked
	tx      pgx.Tx // nil until the transaction is begun
	refused error  // the fence's refusal, or a failure to begin
}

var _ pgx.Tx = (*lazyTx)(nil)

// batch returns a batch that begins the transaction and raises the fence.
func (t *lazyTx) batch() *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: t.s.beginSQL})
	q, args := engine.PGRaise(t.g, t.s.set.IdleMS(t.g))
	b.Queue(q, args...)
	return b
}

// begin begins the transaction and raises the fence in one round trip, without a
// statement of fn's.
func (t *lazyTx) begin(ctx context.Context) error {
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

// ensure begins the transaction unless it has begun; it returns the remembered
// refusal, if any.
func (t *lazyTx) ensure(ctx context.Context) error {
	if t.refused != nil {
		return t.refused
	}
	if t.tx == nil {
		return t.begin(ctx)
	}
	return nil
}

// sendFirst sends BEGIN, the fence raise and fn's first statement in one batch and
// reads the results of BEGIN and the raise. It returns the batch results positioned at
// fn's statement, or nil results when the batch could not be sent (then the
// transaction has been begun on its own, and the caller runs the statement in it).
//
// A refused raise aborts the transaction before PostgreSQL reaches fn's statement: in
// the extended protocol every message after an error is skipped up to the batch's one
// Sync, and in the simple protocol (QueryExecModeSimpleProtocol) the rest of the
// query string is dropped. Either way, had the statement run, it would have run in
// the aborted transaction and failed with "current transaction is aborted".
func (t *lazyTx) sendFirst(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := t.batch()
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil { // BEGIN
		_ = br.Close()
		if !t.conn.IsClosed() && t.conn.PgConn().TxStatus() == 'I' {
			// Nothing began: pgx refused the batch before sending it (fn's statement
			// cannot be prepared or its arguments encoded). Begin on its own, so that
			// fn's statement fails inside the transaction as it would unpipelined.
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

// refuse remembers the refusal of a failed begin or raise and returns it. A
// transaction the refusal aborted stays open (and aborted) until Fenced ends, so that
// nothing fn still sends, not even through Conn, can run. A serialization failure is
// rolled back at once instead, to look up the stored token on the idle connection.
func (t *lazyTx) refuse(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code != codeSerialization &&
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

// rollback ends the transaction if it is open; after a commit or a refusal it does
// nothing.
func (t *lazyTx) rollback(ctx context.Context) {
	if t.tx != nil {
		_ = t.tx.Rollback(ctx) // ErrTxClosed once ended
	}
}

// pipelinable reports whether fn's statement can go into a batch: pgx batches take a
// QueryRewriter (pgx.NamedArgs) as first argument, but not a QueryExecMode or
// result-format option.
func pipelinable(args []any) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

// Exec runs sql in the transaction; as the first statement of fn, in the same round
// trip as BEGIN and the fence raise. A refused raise returns the *fence.StaleError.
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.refused != nil {
		return pgconn.CommandTag{}, t.refused
	}
	if t.tx == nil && pipelinable(args) {
		br, err := t.sendFirst(ctx, sql, args)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		if br != nil {
			tag, err := br.Exec()
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			return tag, err
		}
	}
	if err := t.ensure(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := t.tx.Exec(ctx, sql, args...)
	return tag, t.ended(err)
}

// ended remembers an error of fn's statement that says the server ended the
// transaction for idling, so that Fenced returns fence.ErrIdleTimeout even if fn
// swallows it (COMMIT would then meet only a closed connection).
func (t *lazyTx) ended(err error) error {
	if e := fnErr(t.g, err); e != err {
		t.refused = e
		return e
	}
	return err
}

// Query runs sql in the transaction; as the first statement of fn, in the same round
// trip as BEGIN and the fence raise. A refused raise is returned as the error and by
// the rows' Err.
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.refused != nil {
		return &failedRows{err: t.refused, conn: t.conn}, t.refused
	}
	if t.tx == nil && pipelinable(args) {
		br, err := t.sendFirst(ctx, sql, args)
		if err != nil {
			return &failedRows{err: err, conn: t.conn}, err
		}
		if br != nil {
			rows, err := br.Query()
			if err != nil {
				_ = br.Close()
				return rows, err
			}
			return &batchRows{Rows: rows, br: br}, nil
		}
	}
	if err := t.ensure(ctx); err != nil {
		return &failedRows{err: err, conn: t.conn}, err
	}
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow is Query for one row; errors, a refusal among them, are returned by Scan.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.tx != nil && t.refused == nil {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	rows, _ := t.Query(ctx, sql, args...)
	return firstRow{rows}
}

// Begin starts a savepoint in the transaction, beginning it first.
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// Commit commits the transaction, beginning it first (a fenced empty transaction).
// Fenced commits by itself; a Commit by fn makes Fenced's fail with pgx.ErrTxClosed.
func (t *lazyTx) Commit(ctx context.Context) error {
	if err := t.ensure(ctx); err != nil {
		return err
	}
	return t.tx.Commit(ctx)
}

// Rollback rolls the transaction back, beginning it first so that it behaves as a
// begun transaction does (Fenced's commit then fails with pgx.ErrTxClosed).
func (t *lazyTx) Rollback(ctx context.Context) error {
	if err := t.ensure(ctx); err != nil {
		return err
	}
	return t.tx.Rollback(ctx)
}

// CopyFrom copies rows into the transaction, beginning it first.
func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ensure(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends b in the transaction, beginning it first.
func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.ensure(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

// Prepare prepares a statement on the transaction's connection, beginning the
// transaction first.
func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

// LargeObjects begins the transaction (under Fenced's context) and returns its
// large objects. After a refusal every large-object call fails.
func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	_ = t.ensure(t.ctx) // a failure is remembered and returned by Fenced
	return t.tx.LargeObjects()
}

// Conn begins the transaction (under Fenced's context) and returns its connection.
// After a refusal the connection stays in the aborted transaction until Fenced ends,
// so statements sent through it fail; after a serialization failure it is no longer
// in a transaction: do not write through it (Fenced returns the failure whatever fn
// does).
func (t *lazyTx) Conn() *pgx.Conn {
	_ = t.ensure(t.ctx) // a failure is remembered and returned by Fenced
	return t.conn
}
