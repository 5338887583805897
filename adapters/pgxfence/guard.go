package pgxfence

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/nolockpath"
	"github.com/fencegate/fencegate/internal/pgsql"
	"github.com/fencegate/fencegate/nolock"
)

// Decrement is nolock's guarded take in one UPDATE ... RETURNING, no lock and no
// transaction: PostgreSQL settles concurrent takers on the row lock. The column must
// be an integer (or numeric with no fraction).
func (s *Store) Decrement(ctx context.Context, c nolock.Counter, n int64) (int64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	args, err := nolockpath.TakeArgs(c, n)
	if err != nil {
		return 0, err
	}
	q, err := s.counterStatement(c)
	if err != nil {
		return 0, err
	}
	take := func(args []any) (left int64, took bool, err error) {
		switch err := s.db.QueryRow(ctx, q, s.mode(args)...).Scan(&left); {
		case errors.Is(err, pgx.ErrNoRows):
			return 0, false, nil
		case err != nil:
			return 0, false, writeError("decrement", c.Table, err)
		}
		return left, true, nil
	}
	look := func(keyArgs []any) (left int64, found bool, err error) {
		ct, err := dialect.CheckCounter(dialect.Postgres, c)
		if err != nil {
			return 0, false, err
		}
		q := "SELECT " + ct.Column + " FROM " + ct.Table + " WHERE " + pgsql.Eqs(ct.Keys, pgsql.Params(1, len(ct.Keys)))
		switch err := s.db.QueryRow(ctx, q, s.mode(keyArgs)...).Scan(&left); {
		case errors.Is(err, pgx.ErrNoRows):
			return 0, false, nil
		case err != nil:
			return 0, false, writeError("decrement: look up", c.Table, err)
		}
		return left, true, nil
	}
	return nolockpath.Decrement(c, n, args, take, look)
}

// counterStatement returns the guarded take of c's shape, kept once built. Its
// arguments: n, the key values, n (as two parameters: one used twice plans slower).
func (s *Store) counterStatement(c nolock.Counter) (string, error) {
	var buf [256]byte
	key := append(buf[:0], 'n')
	key = dialect.AppendShapeName(dialect.AppendShapeName(key, c.Table), c.Column)
	for _, k := range c.Key {
		key = dialect.AppendShapeName(key, k.Name)
	}
	if q, ok := s.shapes.Load(key); ok {
		return q, nil
	}
	ct, err := dialect.CheckCounter(dialect.Postgres, c)
	if err != nil {
		return "", err
	}
	q := "UPDATE " + ct.Table + " SET " + ct.Column + " = " + ct.Column + " - $1 WHERE " + pgsql.Eqs(ct.Keys, pgsql.Params(2, len(ct.Keys))) +
		" AND " + ct.Column + " >= $" + strconv.Itoa(len(ct.Keys)+2) + " RETURNING " + ct.Column
	q, _ = s.shapes.Store(string(key), q, nil)
	return q, nil
}

// Insert is nolock's unique-key insert in one INSERT; a *nolock.DuplicateError names
// the constraint and wraps the *pgconn.PgError.
func (s *Store) Insert(ctx context.Context, table string, cols ...fence.Col) error {
	if err := s.usable(); err != nil {
		return err
	}
	qt, names, err := dialect.CheckInsert(dialect.Postgres, table, cols)
	if err != nil {
		return err
	}
	args := make([]any, len(cols))
	for i, c := range cols {
		args[i] = c.Value
	}
	q := "INSERT INTO " + qt + " (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(pgsql.Params(1, len(cols)), ", ") + ")"
	if _, err := s.db.Exec(ctx, q, s.mode(args)...); err != nil {
		return writeError("insert", table, err)
	}
	return nil
}
