package pgxfence

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// batchRows are the rows of fn's first query, read from the batch that carried it:
// once they are done the batch is closed, which frees the connection for fn's next
// statement.
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
