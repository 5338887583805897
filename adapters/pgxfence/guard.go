package pgxfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

// maxDecrementLooks bounds how often Decrement tries again when its guarded UPDATE
// changed nothing yet the look that follows finds enough left (the counter was
// raised in between). Each try is a fresh guarded UPDATE, so the bound only limits
// work, never correctness.
const maxDecrementLooks = 3

// Decrement takes n from c.Column of the row c.Key picks, only if at least n is left,
// and returns what is left after the take. It is one statement, needing no lock and
// no transaction; PostgreSQL settles concurrent takers on the row lock:
//
//	UPDATE t SET col = col - $n WHERE key = $k AND col >= $n RETURNING col
//
// When it changes no row it reads the row once: if less than n is left it returns
// what is left, having taken nothing, with nolock.ErrInsufficient; a missing row is
// fence.ErrNotFound. If
// that read finds enough left (the counter was raised meanwhile) it tries again, a
// few times at most. The key must pick at most one row (a primary key or unique
// index), and the column must be an integer (or numeric with no fraction).
//
// Other errors, before any I/O: fence.ErrInvalidArgument for n <= 0, no key, a
// column named twice, or an empty, overlong or NUL-holding table or column name
// (other names are quoted, never refused). Database errors are
// wrapped.
func (s *Store) Decrement(ctx context.Context, c nolock.Counter, n int64) (int64, error) {
	if s == nil || s.db == nil {
		return 0, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: decrement of %q by %d: the amount must be > 0", fence.ErrInvalidArgument, c.Table, n)
	}
	if c.Column == "" {
		return 0, fmt.Errorf("fence: invalid identifier: empty counter column name: %w", fence.ErrInvalidArgument)
	}
	row := fence.Row{Table: c.Table, Key: c.Key, TokenColumn: c.Column}
	q, err := s.statement('n', row, nil, func() (string, error) { return decrementSQL(row) })
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, len(c.Key)+2)
	args = append(args, n)
	for _, k := range c.Key {
		args = append(args, k.Value)
	}
	args = append(args, n)

	var left int64
	for try := 1; ; try++ {
		err := s.db.QueryRow(ctx, q, args...).Scan(&left)
		if err == nil {
			return left, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, writeError("decrement", c.Table, err)
		}
		// Built only when needed: most takes succeed.
		rw, _, err := checkRow(row, nil, false)
		if err != nil {
			return 0, err
		}
		var look stmt
		look.sql.WriteString("SELECT " + rw.token + " FROM " + rw.table + " WHERE ")
		rw.where(&look, rw.keyArgs(&look))
		err = s.db.QueryRow(ctx, look.sql.String(), look.args...).Scan(&left)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return 0, fmt.Errorf("%w: %s where %s", fence.ErrNotFound, c.Table, describeKey(c.Key))
		case err != nil:
			return 0, writeError("decrement: look up", c.Table, err)
		case left < n || try == maxDecrementLooks:
			return left, fmt.Errorf("%w in %q: wanted %d, %d left", nolock.ErrInsufficient, c.Table, n, left)
		}
	}
}

// decrementSQL checks and quotes a counter, passed as a fence.Row whose token column
// is the counter column (checkRow then refuses a counter that is also a key column),
// and builds the guarded take. Its arguments: n, the key values, n. The amount goes
// twice, as two parameters: one parameter used in both places measured ~9% slower
// (BENCHMARKS.md, no-lock path).
func decrementSQL(row fence.Row) (string, error) {
	rw, _, err := checkRow(row, nil, false)
	if err != nil {
		return "", err
	}
	col := rw.token
	var up stmt
	up.sql.WriteString("UPDATE " + rw.table + " SET " + col + " = " + col + " - " + up.arg(nil) + " WHERE ")
	rw.where(&up, rw.keyArgs(&up))
	up.sql.WriteString(" AND " + col + " >= " + up.arg(nil) + " RETURNING " + col)
	return up.sql.String(), nil
}

// Insert inserts one row into table: one INSERT, the names quoted, the values sent
// as parameters. A unique-key violation returns a *nolock.DuplicateError
// (errors.Is nolock.ErrDuplicate) naming the table and the constraint PostgreSQL
// named, wrapping the *pgconn.PgError.
//
// Other errors, before any I/O: fence.ErrInvalidArgument for no columns, a column
// named twice or an unusable table or column name.
// Database errors are wrapped.
func (s *Store) Insert(ctx context.Context, table string, cols ...fence.Col) error {
	if s == nil || s.db == nil {
		return fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	qt, err := quoteTable(table)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		return fmt.Errorf("%w: insert into %q of no columns", fence.ErrInvalidArgument, table)
	}
	var st stmt
	names := make([]string, len(cols))
	vals := make([]string, len(cols))
	seen := make(map[string]bool, len(cols))
	for i, c := range cols {
		if names[i], err = quoteColumn(c.Name); err != nil {
			return err
		}
		if seen[c.Name] {
			return fmt.Errorf("%w: insert into %q names column %q twice", fence.ErrInvalidArgument, table, c.Name)
		}
		seen[c.Name] = true
		vals[i] = st.arg(c.Value)
	}
	st.sql.WriteString("INSERT INTO " + qt + " (")
	for i, n := range names {
		if i > 0 {
			st.sql.WriteString(", ")
		}
		st.sql.WriteString(n)
	}
	st.sql.WriteString(") VALUES (")
	for i, v := range vals {
		if i > 0 {
			st.sql.WriteString(", ")
		}
		st.sql.WriteString(v)
	}
	st.sql.WriteString(")")
	if _, err := s.db.Exec(ctx, st.sql.String(), st.args...); err != nil {
		return writeError("insert", table, err)
	}
	return nil
}
