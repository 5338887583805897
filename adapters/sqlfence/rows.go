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

// rowStmt is a checked, quoted fence.Row and the columns to set: the parts every
// token-column statement is built from. Names are quoted by the dialect; values only
// ever travel as arguments.
type rowStmt struct {
	table   string // as given, for errors
	qtable  string
	keys    []string // quoted key columns
	keyArgs []any
	where   string // "k1 = ? AND k2 = ?"
	set     []string
	setArgs []any
	tok     string // quoted token column
	g       *engine.Checked
}

// prepare checks the store, grant, row and columns, without I/O.
func (s *Store) prepare(g fence.Grant, r fence.Row, set []fence.Col, needSet bool) (*rowStmt, error) {
	c, err := s.check(g)
	if err != nil {
		return nil, err
	}
	c, err = engine.CheckOne(c)
	if err != nil {
		return nil, err
	}
	st := &rowStmt{table: r.Table, g: c}
	if st.qtable, err = s.table(r.Table); err != nil {
		return nil, err
	}
	if len(r.Key) == 0 {
		return nil, fmt.Errorf("%w: row of %q has no key columns", fence.ErrInvalidArgument, r.Table)
	}
	if needSet && len(set) == 0 {
		return nil, fmt.Errorf("%w: no columns to set in %q", fence.ErrInvalidArgument, r.Table)
	}
	tokName := r.TokenColumn
	if tokName == "" {
		tokName = fence.DefaultTokenColumn
	}
	if st.tok, err = s.ident("token column", tokName); err != nil {
		return nil, err
	}
	if err := st.columns(s, tokName, r.Key, set); err != nil {
		return nil, err
	}
	return st, nil
}

// columns quotes the key and set columns into st, refusing a column named twice
// (names compare case-insensitively in every database) or the token column.
func (st *rowStmt) columns(s *Store, tokName string, key, set []fence.Col) error {
	names := make([]string, 0, 1+len(key)+len(set))
	names = append(names, tokName)
	use := func(what, name string) (string, error) {
		q, err := s.ident(what, name)
		if err != nil {
			return "", err
		}
		for i, prev := range names {
			if strings.EqualFold(prev, name) {
				role := "another column"
				if i == 0 {
					role = "the token column"
				}
				return "", fmt.Errorf("%w: %s %q is also %s", fence.ErrInvalidArgument, what, name, role)
			}
		}
		names = append(names, name)
		return q, nil
	}
	conds := make([]string, 0, len(key))
	for _, k := range key {
		q, err := use("key column", k.Name)
		if err != nil {
			return err
		}
		st.keys = append(st.keys, q)
		st.keyArgs = append(st.keyArgs, k.Value)
		conds = append(conds, q+" = ?")
	}
	st.where = strings.Join(conds, " AND ")
	for _, c := range set {
		q, err := use("column", c.Name)
		if err != nil {
			return err
		}
		st.set = append(st.set, q)
		st.setArgs = append(st.setArgs, c.Value)
	}
	return nil
}

// Upsert inserts the row (key, set columns and g.Token() in the token column), or
// updates it as Update does if its stored token is <= g.Token(). In the same
// transaction it raises the fence_tokens row of g.Resource() to g.Token(), so once a
// newer holder has deleted the row (see Delete) an older one cannot insert it again:
// that, and a row holding a higher token, return a *fence.StaleError and change
// nothing. Writing the values the row already has is a success.
//
// MySQL: ON DUPLICATE KEY UPDATE, every column guarded by IF() on the old token and
// the key; a clash on another unique key returns a *nolock.DuplicateError instead of
// updating that other row. SQLite: ON CONFLICT on r.Key's columns, which must be the
// table's primary key or a unique index. Errors are those of Update.
func (s *Store) Upsert(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("upsert", &err)
	st, err := s.prepare(g, r, set, false)
	if err != nil {
		return err
	}
	g = st.g
	if err := s.d.probe(ctx, s); err != nil {
		return err
	}
	cols := append(append(append([]string{}, st.keys...), st.set...), st.tok)
	q := s.d.rebind("INSERT INTO " + st.qtable + " (" + strings.Join(cols, ", ") + ") VALUES (" +
		strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")" +
		s.d.upsertTail(st))
	args := append(append(append([]any{}, st.keyArgs...), st.setArgs...), int64(g.Token()))

	err = s.writeTx(ctx, "upsert", st.g, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		check, err := s.d.upserted(res)
		if err != nil || !check {
			return err
		}
		stored, found, err := s.stored(ctx, tx, st)
		switch {
		case err != nil:
			return err
		case found && stored == g.Token():
			return nil // MySQL: an AUTO_INCREMENT id, not a refusal
		case found && stored > g.Token():
			return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: stored}
		}
		// MySQL only: the insert hit another unique key and the guarded update left
		// that row alone.
		return &nolock.DuplicateError{Table: r.Table,
			Err: errors.New("sqlfence: upsert clashed with a unique key other than the row's key")}
	})
	if err != nil {
		return s.failed(st, "upsert", err)
	}
	return nil
}

// Delete removes the row if its token column is <= g.Token(), and in the same
// transaction raises the fence_tokens row of g.Resource() to g.Token(): that row is
// the tombstone that makes a later Upsert with an older token stale. A row holding a
// higher token, or a higher fence token, returns a *fence.StaleError; a missing row
// an error matching fence.ErrNotFound; both change nothing (the raise rolls back).
// If r.Key picks more than one row nothing is deleted and fence.ErrInvalidArgument
// is returned. Other errors are those of Update.
func (s *Store) Delete(ctx context.Context, g fence.Grant, r fence.Row) (err error) {
	defer s.observe("delete", &err)
	st, err := s.prepare(g, r, nil, false)
	if err != nil {
		return err
	}
	g = st.g
	if err := s.d.probe(ctx, s); err != nil {
		return err
	}
	q := s.d.rebind("DELETE FROM " + st.qtable + " WHERE " + st.where + " AND " + st.tok + " <= ?")
	args := append(append([]any{}, st.keyArgs...), int64(g.Token()))
	err = s.writeTx(ctx, "delete", st.g, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		switch {
		case err != nil:
			return err
		case n == 1:
			return nil
		case n > 1:
			return fmt.Errorf("%w: the key of %q picks %d rows, not one; nothing was deleted", fence.ErrInvalidArgument, r.Table, n)
		}
		return s.refused(ctx, tx, st)
	})
	if err != nil {
		return s.failed(st, "delete", err)
	}
	return nil
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
	err := q.QueryRowContext(ctx, s.d.rebind("SELECT "+st.tok+" FROM "+st.qtable+" WHERE "+st.where), st.keyArgs...).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("sqlfence: read token of the row in %q: %w", st.table, err)
	case !v.Valid:
		return 0, false, fmt.Errorf("sqlfence: the token column of the row in %q is NULL; declare it NOT NULL DEFAULT 0", st.table)
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
		return fmt.Errorf("%w: no row in %q where %s when written (one was inserted since)", fence.ErrNotFound, st.table, st.where)
	}
	return fmt.Errorf("%w: no row in %q where %s", fence.ErrNotFound, st.table, st.where)
}

// failed maps a write's error: a unique-key violation to a *nolock.DuplicateError,
// fence's own errors, fence.ErrBusy and ctx's error as they are, anything else wrapped.
func (s *Store) failed(st *rowStmt, op string, err error) error {
	if de := s.d.duplicate(err, st.table); de != nil {
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
	return fmt.Errorf("sqlfence: %s %q: %w", op, st.table, err)
}

// onConflictTail is the upsert clause of PostgreSQL and SQLite: ON CONFLICT on the
// key columns, the row updated only if its token, old (as the database names the
// existing row's column), is not higher.
func onConflictTail(st *rowStmt, old string) string {
	var b strings.Builder
	b.WriteString(" ON CONFLICT (" + strings.Join(st.keys, ", ") + ") DO UPDATE SET ")
	for _, c := range st.set {
		b.WriteString(c + " = excluded." + c + ", ")
	}
	b.WriteString(st.tok + " = excluded." + st.tok + " WHERE " + old + " <= excluded." + st.tok)
	return b.String()
}

// rowsNone reports that a statement changed no row.
func rowsNone(res sql.Result) (bool, error) {
	n, err := res.RowsAffected()
	return n == 0, err
}
