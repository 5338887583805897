package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// rowStmt is a checked, quoted fence.Row with the columns to set (engine.Row) and the
// grant: what every token-column statement is built from.
type rowStmt struct {
	engine.Row
	name  string // the table as given, for errors
	where string // "k1 = ? AND k2 = ?"
	g     *engine.Checked
}

// prepare checks the store, grant, row and columns, then the pool once (probe).
func (s *Store) prepare(ctx context.Context, g fence.Grant, r fence.Row, set []fence.Col, needSet bool) (*rowStmt, error) {
	c, err := s.check(g)
	if err != nil {
		return nil, err
	}
	if c, err = engine.CheckOne(c); err != nil {
		return nil, err
	}
	row, err := engine.CheckRow(s.d.dialect(), r, set, needSet)
	if err != nil {
		return nil, err
	}
	if err := s.d.probe(ctx, s); err != nil {
		return nil, err
	}
	return &rowStmt{Row: row, name: r.Table, where: whereKeys(row.Keys), g: c}, nil
}

func whereKeys(keys []string) string { return strings.Join(keys, " = ? AND ") + " = ?" }

// marks is n comma-separated placeholders.
func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// failed is a write's error: a unique-key violation as a *nolock.DuplicateError,
// anything else as wrap says.
func (s *Store) failed(st *rowStmt, op string, err error) error {
	if err == nil {
		return nil
	}
	if de := s.d.duplicate(err, st.name); de != nil {
		return de
	}
	return s.wrap(err, op, st.name, "")
}

// Update is fence's single-row Update (see the fence package doc). PostgreSQL: one
// statement, the fence row raised by a CTE before the UPDATE locks the row (a second
// when the resource has no fence row yet). MySQL: one UPDATE joining the fence row to
// the row, or a transaction for the resource's first write. SQLite: a transaction.
// Besides fence's errors: fence.ErrInvalidArgument for a MySQL pool without
// clientFoundRows, fence.ErrSchema without fence_tokens, fence.ErrBusy.
func (s *Store) Update(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("update", &err)
	st, err := s.prepare(ctx, g, r, set, true)
	if err != nil {
		return err
	}
	return s.failed(st, "update", s.d.update(ctx, s, st))
}

// updateTry runs a one-statement Update (? placeholders), trying again while busy,
// and returns the rows it changed.
func (s *Store) updateTry(ctx context.Context, st *rowStmt, q string, args []any) (n int64, err error) {
	q = s.d.rebind(q)
	err = s.retry(ctx, func() (err error) {
		if n, err = affected(s.db.ExecContext(ctx, q, args...)); err != nil {
			if u := s.unknownOutcome("update", st.g, err, false); u != nil {
				return u
			}
			if s.missingSchema(err) {
				return fmt.Errorf("%w: %w", fence.ErrSchema, err)
			}
		}
		return err
	})
	return n, err
}

// txUpdate is Update as UPDATE t SET c = ?, tok = ? WHERE key AND tok <= ?, in a
// transaction that raises the fence row first.
func (s *Store) txUpdate(ctx context.Context, st *rowStmt) error {
	var b strings.Builder
	b.WriteString("UPDATE " + st.Table + " SET ")
	for _, c := range st.Set {
		b.WriteString(c + " = ?, ")
	}
	b.WriteString(st.Token + " = ? WHERE " + st.where + " AND " + st.Token + " <= ?")
	q, tok := s.d.rebind(b.String()), int64(st.g.Token())
	args := slices.Concat(st.SetVals, []any{tok}, st.KeyVals, []any{tok})
	return s.writeTx(ctx, "update", st.g, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, q, args...))
		if err != nil || n > 0 {
			return err
		}
		return s.refused(ctx, tx, st)
	})
}

// writeTx runs fn in a transaction that first raises g's fence row, and commits,
// trying the whole transaction again while the database is busy (every statement in
// it is the Store's own).
func (s *Store) writeTx(ctx context.Context, op string, g *engine.Checked, fn func(*sql.Tx) error) error {
	return s.retry(ctx, func() error {
		tx, err := s.beginRaise(ctx, s.db, nil, g)
		if err != nil {
			return err
		}
		return engine.RunTx(g, &fencedTx{s: s, ctx: ctx, tx: tx, g: g, op: op, begun: time.Now()}, func() error { return fn(tx) })
	})
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// stored reads the row's token column.
func (s *Store) stored(ctx context.Context, q querier, st *rowStmt) (fence.Token, bool, error) {
	var v sql.NullInt64
	err := q.QueryRowContext(ctx, s.d.rebind("SELECT "+st.Token+" FROM "+st.Table+" WHERE "+st.where), st.KeyVals...).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("sqlfence: read token of the row in %q: %w", st.name, err)
	case !v.Valid:
		return 0, false, fmt.Errorf("sqlfence: the token column of the row in %q is NULL; declare it NOT NULL DEFAULT 0", st.name)
	}
	return fence.Token(v.Int64), true, nil
}

// refused tells why a conditional write changed no row: a higher stored token, or no
// such row.
func (s *Store) refused(ctx context.Context, q querier, st *rowStmt) error {
	stored, found, err := s.stored(ctx, q, st)
	switch {
	case err != nil:
		return err
	case found && stored > st.g.Token():
		return stale(st.g, stored)
	case found:
		// Matched nothing a moment ago, yet here now: inserted concurrently.
		return fmt.Errorf("%w: no row in %q where %s when written (one was inserted since)", fence.ErrNotFound, st.name, st.where)
	}
	return fmt.Errorf("%w: no row in %q where %s", fence.ErrNotFound, st.name, st.where)
}

// fenceStale reads g's mark after a one-statement Update changed nothing: a
// *fence.StaleError when it is higher than g's token; found: a mark is stored.
func (s *Store) fenceStale(ctx context.Context, g *engine.Checked) (found bool, err error) {
	var v int64
	err = s.db.QueryRowContext(ctx, s.d.rebind(readMarkSQL), g.Resource()).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil && s.missingSchema(err):
		return false, fmt.Errorf("%w: %w", fence.ErrSchema, err)
	case err != nil:
		return false, fmt.Errorf("sqlfence: read fence row %q: %w", g.Resource(), err)
	case fence.Token(v) > g.Token():
		return true, stale(g, fence.Token(v))
	}
	return true, nil
}
