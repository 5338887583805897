package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// rowStmt is a checked, quoted fence.Row and the columns to set (engine.Row), with
// the grant: what every token-column statement is built from.
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
	return &rowStmt{Row: row, name: r.Table, where: strings.Join(row.Keys, " = ? AND ") + " = ?", g: c}, nil
}

// writeTx runs fn in a transaction that first raises g's fence row, and commits; it
// tries the whole transaction again while the database is busy (every statement in
// it is the Store's own).
func (s *Store) writeTx(ctx context.Context, op string, c *engine.Checked, fn func(*sql.Tx) error) error {
	return s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlfence: begin: %w", err)
		}
		if err := s.raise(ctx, tx, c); err != nil {
			_ = tx.Rollback()
			return err
		}
		t := &fencedTx{s: s, ctx: ctx, tx: tx, g: c, op: op, begun: time.Now()}
		return engine.RunTx(c, t, func() error { return fn(tx) })
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

// refused tells why a conditional write changed no row: a higher stored token (a
// *fence.StaleError), or no such row.
func (s *Store) refused(ctx context.Context, q querier, st *rowStmt) error {
	g := st.g
	stored, found, err := s.stored(ctx, q, st)
	switch {
	case err != nil:
		return err
	case found && stored > g.Token():
		return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: stored}
	case found:
		// Matched nothing a moment ago, yet here now: inserted concurrently.
		return fmt.Errorf("%w: no row in %q where %s when written (one was inserted since)", fence.ErrNotFound, st.name, st.where)
	}
	return fmt.Errorf("%w: no row in %q where %s", fence.ErrNotFound, st.name, st.where)
}

// failed maps a write's error: a unique-key violation to a *nolock.DuplicateError,
// fence's own errors, fence.ErrBusy and ctx's error as they are, anything else wrapped.
func (s *Store) failed(st *rowStmt, op string, err error) error {
	if de := s.d.duplicate(err, st.name); de != nil {
		return de
	}
	var (
		se *fence.StaleError
		de *nolock.DuplicateError
	)
	switch {
	case errors.As(err, &se), errors.As(err, &de), errors.Is(err, fence.ErrNotFound),
		errors.Is(err, fence.ErrCommitUnknown),
		errors.Is(err, fence.ErrInvalidArgument), errors.Is(err, fence.ErrBusy),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return fmt.Errorf("sqlfence: %s %q: %w", op, st.name, err)
}

// Update is fence's single-row Update (see the fence package doc). PostgreSQL: one
// statement, the fence row raised by a CTE before the UPDATE locks the row (a second
// statement when the resource has no fence row yet). MySQL: one UPDATE joining the
// fence row to the row, or a transaction for the resource's first write. SQLite: a
// transaction. Besides fence's errors: fence.ErrInvalidArgument for a MySQL pool
// without clientFoundRows, fence.ErrSchema without fence_tokens, fence.ErrBusy.
func (s *Store) Update(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("update", &err)
	st, err := s.prepare(ctx, g, r, set, true)
	if err != nil {
		return err
	}
	if err := s.d.update(ctx, s, st); err != nil {
		return s.failed(st, "update", err)
	}
	return nil
}

// updateTry runs a one-statement Update (q, ? placeholders) once, trying again while
// busy, and returns the rows it changed.
func (s *Store) updateTry(ctx context.Context, st *rowStmt, q string, args []any) (int64, error) {
	q = s.d.rebind(q)
	var n int64
	err := s.retry(ctx, func() error {
		var err error
		n, err = exec(ctx, s.db, q, args...)
		if err != nil {
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

// txUpdate is Update in a transaction that raises the fence row first (writeTx).
func (s *Store) txUpdate(ctx context.Context, st *rowStmt) error {
	return s.writeTx(ctx, "update", st.g, func(tx *sql.Tx) error {
		n, err := exec(ctx, tx, s.d.rebind(st.plainUpdate()), st.plainArgs(st.g)...)
		if err != nil || n > 0 {
			return err
		}
		return s.refused(ctx, tx, st)
	})
}

// fenceStale reads g's stored mark after a one-statement Update changed nothing: a
// *fence.StaleError when it is higher than g's token; found reports a mark stored.
func (s *Store) fenceStale(ctx context.Context, g *engine.Checked) (found bool, err error) {
	var v int64
	err = s.db.QueryRowContext(ctx, s.d.rebind("SELECT token FROM fence_tokens WHERE resource = ?"), g.Resource()).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil && s.missingSchema(err):
		return false, fmt.Errorf("%w: %w", fence.ErrSchema, err)
	case err != nil:
		return false, fmt.Errorf("sqlfence: read fence row %q: %w", g.Resource(), err)
	case fence.Token(v) > g.Token():
		return true, &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: fence.Token(v)}
	}
	return true, nil
}

type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// exec runs q and returns the rows it matched.
func exec(ctx context.Context, db execer, q string, args ...any) (int64, error) {
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// plainUpdate is the token-column UPDATE alone: UPDATE t SET c = ?, tok = ? WHERE key
// AND tok <= ?. Arguments: plainArgs.
func (st *rowStmt) plainUpdate() string {
	var b strings.Builder
	b.WriteString("UPDATE " + st.Table + " SET ")
	for _, c := range st.Set {
		b.WriteString(c + " = ?, ")
	}
	b.WriteString(st.Token + " = ? WHERE " + st.where + " AND " + st.Token + " <= ?")
	return b.String()
}

func (st *rowStmt) plainArgs(g fence.Grant) []any {
	tok := int64(g.Token())
	args := make([]any, 0, len(st.SetVals)+len(st.KeyVals)+2)
	args = append(append(args, st.SetVals...), tok)
	return append(append(args, st.KeyVals...), tok)
}
