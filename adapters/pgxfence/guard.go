package pgxfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// Decrement is nolock's guarded take (see nolock.Counter) in one statement, no lock
// and no transaction: UPDATE t SET col = col - $n WHERE key = $k AND col >= $n
// RETURNING col. PostgreSQL settles concurrent takers on the row lock. The column
// must be an integer (or numeric with no fraction).
func (s *Store) Decrement(ctx context.Context, c nolock.Counter, n int64) (int64, error) {
	if s == nil || s.db == nil {
		return 0, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: decrement of %q by %d: the amount must be > 0", fence.ErrInvalidArgument, c.Table, n)
	}
	q, err := s.counterStatement(c)
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
		ct, err := engine.CheckCounter(engine.Postgres, c)
		if err != nil {
			return 0, err
		}
		left = 0
		err = s.db.QueryRow(ctx, "SELECT "+ct.Column+" FROM "+ct.Table+" WHERE "+counterWhere(ct, 1), args[1:len(args)-1]...).Scan(&left)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, writeError("decrement: look up", c.Table, err)
		}
		if err := engine.TakeRefused(c, n, left, err == nil, try); err != nil {
			return left, err
		}
	}
}

// counterWhere is "k1 = $first AND k2 = $first+1 ...".
func counterWhere(c engine.Counter, first int) string {
	var b strings.Builder
	for i, k := range c.Keys {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(k + " = $" + strconv.Itoa(first+i))
	}
	return b.String()
}

// counterStatement returns the guarded take of c's shape, kept once built. Its
// arguments: n, the key values, n (the amount twice, as two parameters: one used in
// both places is slower, see BENCHMARKS.md's no-lock path).
func (s *Store) counterStatement(c nolock.Counter) (string, error) {
	var buf [256]byte
	key := append(buf[:0], 'n')
	key = engine.AppendShapeName(engine.AppendShapeName(key, c.Table), c.Column)
	for _, k := range c.Key {
		key = engine.AppendShapeName(key, k.Name)
	}
	if q, ok := s.shapes.Load(key); ok {
		return q, nil
	}
	ct, err := engine.CheckCounter(engine.Postgres, c)
	if err != nil {
		return "", err
	}
	q := "UPDATE " + ct.Table + " SET " + ct.Column + " = " + ct.Column + " - $1 WHERE " + counterWhere(ct, 2) +
		" AND " + ct.Column + " >= $" + strconv.Itoa(len(ct.Keys)+2) + " RETURNING " + ct.Column
	q, _ = s.shapes.Store(string(key), q, nil)
	return q, nil
}

// Insert is nolock's unique-key insert: one INSERT, names quoted, values as
// parameters. A *nolock.DuplicateError names the constraint PostgreSQL named and
// wraps the *pgconn.PgError.
func (s *Store) Insert(ctx context.Context, table string, cols ...fence.Col) error {
	if s == nil || s.db == nil {
		return fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	qt, names, err := engine.CheckInsert(engine.Postgres, table, cols)
	if err != nil {
		return err
	}
	var st stmt
	vals := make([]string, len(cols))
	for i, c := range cols {
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
