package sqlfence

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/fencedtx"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/nolock"
)

// rowStmt is a checked, quoted fence.Row with its set columns, and the grant.
type rowStmt struct {
	dialect.Row
	name  string // the table as given, for errors
	token string // the token column as given, for errors
	where string // "k1 = ? AND k2 = ?"
	g     *grant.Checked
}

// prepare checks the store, grant, row and columns, then the pool once (probe).
func (s *Store) prepare(ctx context.Context, g fence.Grant, r fence.Row, set []fence.Col, needSet bool) (*rowStmt, error) {
	c, err := s.check(g)
	if err != nil {
		return nil, err
	}
	if c, err = grant.CheckOne(c); err != nil {
		return nil, err
	}
	row, err := dialect.CheckRow(s.d.dialect(), r, set, needSet)
	if err != nil {
		return nil, err
	}
	if err := s.d.probe(ctx, s); err != nil {
		return nil, err
	}
	tok := cmp.Or(r.TokenColumn, fence.DefaultTokenColumn)
	return &rowStmt{Row: row, name: r.Table, token: tok, where: eqs("", row.Keys, " AND "), g: c}, nil
}

// eqs is "p.c1 = ?<sep>p.c2 = ?", built in one allocation.
func eqs(p string, cols []string, sep string) string {
	var b strings.Builder
	b.Grow(len(cols) * (len(p) + len(sep) + 16))
	for i, c := range cols {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(p)
		b.WriteString(c)
		b.WriteString(" = ?")
	}
	return b.String()
}

// marks is n comma-separated placeholders.
func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// failed is a write's error: a unique-key violation is a *nolock.DuplicateError.
func (s *Store) failed(st *rowStmt, op string, err error) error {
	if err == nil {
		return nil
	}
	if de := s.d.duplicate(err, st.name); de != nil {
		return de
	}
	if tc := s.noTokenColumn(st, op, err); tc != nil {
		return tc
	}
	return s.wrap(err, op, st.name, "")
}

// noTokenColumn is fence.ErrSchema naming the migration that adds st's token column
// when err says the table lacks it, else nil.
func (s *Store) noTokenColumn(st *rowStmt, op string, err error) error {
	if !s.d.missingColumn(err, st.token) {
		return nil
	}
	return dialect.NoTokenColumn(s.d.dialect(), "sqlfence", op, st.name, st.token, err)
}

// Update is the [fence] package doc's single-row Update. PostgreSQL: one statement (a
// second when the resource has no fence row yet); MySQL: one UPDATE joining the fence
// row to the row (a transaction for the resource's first write); SQLite: a
// transaction. It also returns Fenced's errors (the probe's, ErrSchema, ErrBusy).
func (s *Store) Update(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("update", &err)
	st, err := s.prepare(ctx, g, r, set, true)
	if err != nil {
		return err
	}
	return s.failed(st, "update", s.d.update(ctx, s, st))
}

// updateTry runs a one-statement Update, retried while busy; n: the rows it changed.
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

// txUpdate is Update in a transaction that raises the fence row first.
func (s *Store) txUpdate(ctx context.Context, st *rowStmt) error {
	return s.writeTx(ctx, "update", st.g, func(tx *sql.Tx) error {
		q := s.d.rebind("UPDATE " + st.Table + " SET " + eqs("", st.Set, ", ") + ", " + st.Token + " = ? WHERE " + st.where + " AND " + st.Token + " <= ?")
		tok := int64(st.g.Token())
		n, err := affected(tx.ExecContext(ctx, q, slices.Concat(st.SetVals, []any{tok}, st.KeyVals, []any{tok})...))
		if err != nil || n > 0 {
			return err
		}
		return s.refused(ctx, tx, st)
	})
}

// Upsert is fence's single-row Upsert, in a transaction that raises the fence row;
// r.Key must be a primary key or unique index. On MySQL a clash on another unique key
// is a *nolock.DuplicateError that changes no row. Errors are those of Update.
func (s *Store) Upsert(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("upsert", &err)
	st, err := s.prepare(ctx, g, r, set, false)
	if err != nil {
		return err
	}
	cols := slices.Concat(st.Keys, st.Set, []string{st.Token})
	q := s.d.rebind("INSERT INTO " + st.Table + " (" + strings.Join(cols, ", ") + ") VALUES (" + marks(len(cols)) + ")" + s.d.upsertTail(st))
	args := slices.Concat(st.KeyVals, st.SetVals, []any{int64(st.g.Token())})
	return s.failed(st, "upsert", s.writeTx(ctx, "upsert", st.g, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if check, err := s.d.upserted(res); err != nil || !check {
			return err
		}
		stored, found, err := s.stored(ctx, tx, st)
		switch {
		case err != nil:
			return err
		case found && stored == st.g.Token():
			return nil // MySQL: an AUTO_INCREMENT id, not a refusal
		case found && stored > st.g.Token():
			return stale(st.g, stored)
		}
		// MySQL: another unique key clashed; the guarded update left that row alone.
		return &nolock.DuplicateError{Table: r.Table,
			Err: errors.New("sqlfence: upsert clashed with a unique key other than the row's key")}
	}))
}

// Delete is fence's single-row Delete, in a transaction that raises the fence row
// (the tombstone a stale Upsert meets). Errors are those of Update.
func (s *Store) Delete(ctx context.Context, g fence.Grant, r fence.Row) (err error) {
	defer s.observe("delete", &err)
	st, err := s.prepare(ctx, g, r, nil, false)
	if err != nil {
		return err
	}
	q := s.d.rebind("DELETE FROM " + st.Table + " WHERE " + st.where + " AND " + st.Token + " <= ?")
	args := slices.Concat(st.KeyVals, []any{int64(st.g.Token())})
	return s.failed(st, "delete", s.writeTx(ctx, "delete", st.g, func(tx *sql.Tx) error {
		switch n, err := affected(tx.ExecContext(ctx, q, args...)); {
		case err != nil:
			return err
		case n > 1:
			return fmt.Errorf("%w: the key of %q picks %d rows, not one; nothing was deleted", fence.ErrInvalidArgument, r.Table, n)
		case n == 0:
			return s.refused(ctx, tx, st)
		}
		return nil
	}))
}

// onConflictTail is PostgreSQL's and SQLite's upsert clause: the row updated unless
// its token, old (as the database names the existing row's), is higher.
func onConflictTail(st *rowStmt, old string) string {
	var b strings.Builder
	b.WriteString(" ON CONFLICT (" + strings.Join(st.Keys, ", ") + ") DO UPDATE SET ")
	for _, c := range st.Set {
		b.WriteString(c + " = excluded." + c + ", ")
	}
	b.WriteString(st.Token + " = excluded." + st.Token + " WHERE " + old + " <= excluded." + st.Token)
	return b.String()
}

// writeTx runs fn in a transaction that raises g's fence row first, and commits,
// retried whole while busy (every statement in it is the Store's own).
func (s *Store) writeTx(ctx context.Context, op string, g *grant.Checked, fn func(*sql.Tx) error) error {
	return s.retry(ctx, func() error {
		tx, err := s.beginRaise(ctx, s.db, nil, g)
		if err != nil {
			return err
		}
		return fencedtx.Run(g, &fencedTx{s: s, ctx: ctx, tx: tx, g: g, op: op, begun: time.Now()}, tx, fn)
	})
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

func (s *Store) stored(ctx context.Context, q querier, st *rowStmt) (fence.Token, bool, error) {
	var v sql.NullInt64
	// r.: SQLite reads an unqualified "fence_token" it cannot find as a string.
	err := q.QueryRowContext(ctx, s.d.rebind("SELECT r."+st.Token+" FROM "+st.Table+" AS r WHERE "+st.where), st.KeyVals...).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case s.d.missingColumn(err, st.token):
		return 0, false, err // failed names the migration
	case err != nil:
		return 0, false, fmt.Errorf("sqlfence: read token of the row in %q: %w", st.name, err)
	case !v.Valid:
		return 0, false, fmt.Errorf("sqlfence: the token column of the row in %q is NULL; declare it NOT NULL DEFAULT 0", st.name)
	}
	return fence.Token(v.Int64), true, nil
}

// refused tells why a write changed no row: a higher stored token, or no such row.
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
// *fence.StaleError when higher than g's token; found: a mark is stored.
func (s *Store) fenceStale(ctx context.Context, g *grant.Checked) (found bool, err error) {
	seen, found, err := s.mark(ctx, s.db, g.Resource())
	if err == nil && seen > g.Token() {
		return true, stale(g, seen)
	}
	return found, err
}
