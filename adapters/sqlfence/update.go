package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// Update sets the columns on the row if its token column is <= g.Token() and no higher
// token is stored in g.Resource()'s fence row, storing g.Token() in both: one mark
// per resource, shared with Fenced, Upsert and Delete, so a stale Update is refused
// once a newer token has written any row of the resource by any form. A missing row
// leaves the fence row as it was. How, per database:
//
//   - PostgreSQL: one statement, the fence row raised by a data-modifying CTE before
//     the UPDATE locks the row (the order Fenced locks in); a second one, whose raise
//     also inserts the fence row, when the resource has none yet or the first was
//     refused.
//   - MySQL: one multi-table UPDATE of the fence row joined (STRAIGHT_JOIN: fence
//     row first) with the row. A resource without a fence row yet is written as
//     SQLite's are, in a transaction that inserts it.
//   - SQLite: a transaction that raises the fence row, then updates (one writer
//     holds the database lock anyway; statements run in-process).
//
// When it changes no row it reads the tokens once to return a *fence.StaleError
// (Seen = the higher stored token) or an error matching fence.ErrNotFound. Writing the
// values the row already has is a success (on MySQL that needs clientFoundRows, which
// the Store checks). r.Key must pick at most one row (a primary or unique key).
//
// Other errors: fence.ErrInvalidArgument (no key, no columns, a column named twice, a
// fence.Set grant, a MySQL pool without clientFoundRows, an unusable table or
// column name), the grant errors of fence.CheckGrant, fence.ErrSchema (no fence_tokens), a
// *nolock.DuplicateError when a set column hits a unique key, fence.ErrBusy, a
// fence.ErrCommitUnknown when the reply to its statement (or COMMIT) was lost, or
// the driver's error wrapped.
func (s *Store) Update(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("update", &err)
	st, err := s.prepare(g, r, set, true)
	if err != nil {
		return err
	}
	if err := s.d.probe(ctx, s); err != nil {
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
	b.WriteString("UPDATE " + st.qtable + " SET ")
	for _, c := range st.set {
		b.WriteString(c + " = ?, ")
	}
	b.WriteString(st.tok + " = ? WHERE " + st.where + " AND " + st.tok + " <= ?")
	return b.String()
}

func (st *rowStmt) plainArgs(g fence.Grant) []any {
	tok := int64(g.Token())
	args := make([]any, 0, len(st.setArgs)+len(st.keyArgs)+2)
	args = append(append(args, st.setArgs...), tok)
	return append(append(args, st.keyArgs...), tok)
}
