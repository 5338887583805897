package pgxfence

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// batchRows are fn's first query's rows; once done they close the batch, freeing the conn.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closed   bool
	closeErr error
}

func (r *batchRows) finish() {
	if !r.closed {
		r.closed = true
		r.closeErr = r.br.Close()
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.finish()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// failedRows are the rows of a query that was refused before it ran.
type failedRows struct {
	err  error
	conn *pgx.Conn
}

func (r *failedRows) Close()                                       {}
func (r *failedRows) Err() error                                   { return r.err }
func (r *failedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *failedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *failedRows) Next() bool                                   { return false }
func (r *failedRows) Scan(...any) error                            { return r.err }
func (r *failedRows) Values() ([]any, error)                       { return nil, r.err }
func (r *failedRows) RawValues() [][]byte                          { return nil }
func (r *failedRows) Conn() *pgx.Conn                              { return r.conn }
func (r *failedRows) TypeMap() *pgtype.Map                         { return r.conn.TypeMap() }

// firstRow is QueryRow over Query's rows, as pgx's own QueryRow is.
type firstRow struct{ rows pgx.Rows }

func (r firstRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if err := r.rows.Err(); err != nil {
		return err
	}
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			return errors.New("pgxfence: cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

var _ pgx.Tx = (*lazyTx)(nil)

// pipelinable: a batch takes a QueryRewriter first argument, no exec mode or result format.
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

// Exec runs sql in the transaction; fn's first statement goes with BEGIN and the raise.
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.refused != nil {
		return pgconn.CommandTag{}, t.refused
	}
	if t.tx == nil && !t.s.pooler && pipelinable(args) {
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
	tag, err := t.tx.Exec(ctx, sql, t.s.fnMode(args)...)
	return tag, t.ended(err)
}

// Query is Exec for rows; a refusal is both the error and the rows' Err.
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.refused != nil {
		return &failedRows{err: t.refused, conn: t.conn}, t.refused
	}
	if t.tx == nil && !t.s.pooler && pipelinable(args) {
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
	rows, err := t.tx.Query(ctx, sql, t.s.fnMode(args)...)
	return idleRows{rows, t}, t.ended(err)
}

// QueryRow is Query for one row; its errors, a refusal among them, come from Scan.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, _ := t.Query(ctx, sql, args...)
	return firstRow{rows}
}

// Begin starts a savepoint in the transaction, beginning it first.
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	sp, err := t.tx.Begin(ctx)
	return sp, t.ended(err)
}

// Commit commits, beginning first; Fenced's own commit then fails with pgx.ErrTxClosed.
func (t *lazyTx) Commit(ctx context.Context) error {
	if err := t.ensure(ctx); err != nil {
		return err
	}
	return t.ended(t.tx.Commit(ctx))
}

// Rollback rolls back, beginning first; Fenced's commit then fails with pgx.ErrTxClosed.
func (t *lazyTx) Rollback(ctx context.Context) error {
	if err := t.ensure(ctx); err != nil {
		return err
	}
	return t.ended(t.tx.Rollback(ctx))
}

// CopyFrom copies rows into the transaction, beginning it first.
func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ensure(ctx); err != nil {
		return 0, err
	}
	n, err := t.tx.CopyFrom(ctx, table, columns, src)
	return n, t.ended(err)
}

// SendBatch sends b in the transaction, beginning it first.
func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.ensure(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return idleBatch{t.tx.SendBatch(ctx, b), t}
}

// Prepare prepares a statement on the transaction's connection, beginning it first.
func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	sd, err := t.tx.Prepare(ctx, name, sql)
	return sd, t.ended(err)
}

// LargeObjects begins (under Fenced's ctx); after a refusal every call on them fails.
func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	_ = t.ensure(t.ctx) // a failure is remembered and returned by Fenced
	return t.tx.LargeObjects()
}

// Conn begins (under Fenced's ctx) and returns the connection; after a refusal it is in
// the aborted transaction, or none after a 40001: do not write through it.
func (t *lazyTx) Conn() *pgx.Conn {
	_ = t.ensure(t.ctx) // a failure is remembered and returned by Fenced
	return t.conn
}

// idleRows and idleBatch report a transaction the server ended for idling as
// fence.ErrIdleTimeout (lazyTx.ended), as Exec does.
type idleRows struct {
	pgx.Rows
	t *lazyTx
}

func (r idleRows) Err() error { return r.t.ended(r.Rows.Err()) }

type idleBatch struct {
	pgx.BatchResults
	t *lazyTx
}

func (b idleBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.t.ended(err)
}

func (b idleBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	return idleRows{rows, b.t}, b.t.ended(err)
}

func (b idleBatch) QueryRow() pgx.Row {
	rows, _ := b.Query()
	return firstRow{rows}
}

func (b idleBatch) Close() error { return b.t.ended(b.BatchResults.Close()) }
