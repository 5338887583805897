package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
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
	g = st.g
	if err := s.probe(ctx); err != nil {
		return err
	}
	if s.d.Dialect == dSQLite {
		err = s.txUpdate(ctx, g, st)
	} else {
		err = s.updateOne(ctx, g, st)
	}
	if err != nil {
		return st.failed("update", err)
	}
	return nil
}

// updateOne is Update in one statement (PostgreSQL, MySQL). On PostgreSQL the fence
// row is raised by a plain UPDATE first (cheaper for the server) and by the upsert,
// which also inserts it, only when that wrote nothing.
func (s *Store) updateOne(ctx context.Context, g fence.Grant, st *rowStmt) error {
	bumps := []bool{false}
	if s.d.Dialect == dPostgres {
		bumps = []bool{true, false}
	}
	for _, bump := range bumps {
		n, err := s.updateTry(ctx, g, st, bump)
		if err != nil || n > 0 {
			return err
		}
	}
	fenceTok, found, err := s.fenceToken(ctx, g.Resource())
	switch {
	case err != nil:
		return err
	case found && fenceTok > g.Token():
		return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: fenceTok}
	case !found && s.d.Dialect == dMySQL:
		// The join needs the fence row: the resource's first write goes in a
		// transaction that inserts it, as SQLite's do.
		return s.txUpdate(ctx, g, st)
	}
	return s.refused(ctx, s.db, g, st)
}

// updateTry runs the one-statement Update once, trying again while busy, and returns
// the rows it changed.
func (s *Store) updateTry(ctx context.Context, g fence.Grant, st *rowStmt, bump bool) (int64, error) {
	q, args := st.fencedUpdate(s.d, g, bump)
	q = s.d.rebind(q)
	var n int64
	err := s.retry(ctx, func() error {
		var err error
		n, err = exec(ctx, s.db, q, args...)
		if err != nil {
			if u := unknownOutcome("update", g, err, false); u != nil {
				return u
			}
			if missingSchema(err) {
				return fmt.Errorf("%w: %w", fence.ErrSchema, err)
			}
		}
		return err
	})
	return n, err
}

// txUpdate is Update in a transaction that raises the fence row first (writeTx).
func (s *Store) txUpdate(ctx context.Context, g fence.Grant, st *rowStmt) error {
	return s.writeTx(ctx, "update", g, func(tx *sql.Tx) error {
		n, err := exec(ctx, tx, s.d.rebind(st.plainUpdate()), st.plainArgs(g)...)
		if err != nil || n > 0 {
			return err
		}
		return s.refused(ctx, tx, g, st)
	})
}

// fenceToken reads the resource's stored mark.
func (s *Store) fenceToken(ctx context.Context, resource string) (fence.Token, bool, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, s.d.rebind("SELECT token FROM fence_tokens WHERE resource = ?"), resource).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		if missingSchema(err) {
			return 0, false, fmt.Errorf("%w: %w", fence.ErrSchema, err)
		}
		return 0, false, fmt.Errorf("sqlfence: read fence row %q: %w", resource, err)
	}
	return fence.Token(v), true, nil
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

// fencedUpdate builds the one-statement Update of PostgreSQL or MySQL and its
// arguments (? placeholders). On PostgreSQL, bump raises the fence row with a plain
// UPDATE (nothing when the row is missing), else with the upsert; either re-checks
// its WHERE on the newest version of a fence row it waited for.
func (st *rowStmt) fencedUpdate(d dialect, g fence.Grant, bump bool) (string, []any) {
	tok := int64(g.Token())
	args := make([]any, 0, 2*len(st.keyArgs)+len(st.setArgs)+5)
	var b strings.Builder
	if d.Dialect == dMySQL {
		// Every column is qualified: the caller's table may have columns named like
		// fence_tokens' own.
		const t = "fencegate_t."
		b.WriteString("UPDATE fence_tokens AS fencegate_ft STRAIGHT_JOIN " + st.qtable + " AS fencegate_t ON ")
		for i, k := range st.keys {
			if i > 0 {
				b.WriteString(" AND ")
			}
			b.WriteString(t + k + " = ?")
		}
		args = append(args, st.keyArgs...)
		b.WriteString(" SET ")
		for _, c := range st.set {
			b.WriteString(t + c + " = ?, ")
		}
		args = append(args, st.setArgs...)
		b.WriteString(t + st.tok + " = ?, fencegate_ft.updated_at = CURRENT_TIMESTAMP(6), fencegate_ft.token = ?" +
			" WHERE fencegate_ft.resource = ? AND fencegate_ft.token <= ? AND " + t + st.tok + " <= ?")
		return b.String(), append(args, tok, tok, g.Resource(), tok, tok)
	}
	match := st.where + " AND " + st.tok + " <= ?"
	if bump {
		b.WriteString("WITH fencegate_raised AS (UPDATE fence_tokens AS fencegate_ft SET token = CAST(? AS BIGINT), " +
			"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.resource = CAST(? AS VARCHAR) AND fencegate_ft.token <= CAST(? AS BIGINT) " +
			"AND EXISTS (SELECT 1 FROM " + st.qtable + " WHERE " + match + ") RETURNING 1) ")
		args = append(args, tok, g.Resource(), tok)
	} else {
		b.WriteString("WITH fencegate_raised AS (INSERT INTO fence_tokens AS fencegate_ft (resource, token) " +
			"SELECT CAST(? AS VARCHAR), CAST(? AS BIGINT) WHERE EXISTS (SELECT 1 FROM " + st.qtable + " WHERE " + match + ") " +
			"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = CURRENT_TIMESTAMP " +
			"WHERE fencegate_ft.token <= EXCLUDED.token RETURNING 1) ")
		args = append(args, g.Resource(), tok)
	}
	args = append(append(args, st.keyArgs...), tok)
	b.WriteString(st.plainUpdate() + " AND EXISTS (SELECT 1 FROM fencegate_raised)")
	return b.String(), append(args, st.plainArgs(g)...)
}
