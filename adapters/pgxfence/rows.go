package pgxfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// Update is fence's single-row Update (see the fence package doc) in one statement:
// a data-modifying CTE raises the fence row before the UPDATE locks the row, the
// order Fenced locks in. A second statement, whose raise also inserts the fence row,
// runs when the resource has none yet or the first was refused.
func (s *Store) Update(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("update", &err)
	c, err := s.checkSingle(g)
	if err != nil {
		return err
	}
	g = c
	args := shapeArgs([]any{g.Resource(), int64(g.Token())}, set, r.Key)
	// The fence row is raised by a plain UPDATE where it exists, else (or when the
	// write was refused) by the upsert, which also inserts it.
	for _, op := range []byte{'U', 'u'} {
		q, err := s.statement(op, r, set, func() (string, error) { return updateSQL(r, set, op == 'U') })
		if err != nil {
			return err
		}
		tag, err := s.db.Exec(ctx, q, args...)
		if err != nil {
			if u := s.unknownOutcome("update", g, err); u != nil {
				return u
			}
			return writeError("update", r.Table, err)
		}
		if tag.RowsAffected() > 0 {
			return nil
		}
	}
	rw, _, err := checkRow(r, set, true)
	if err != nil {
		return err
	}
	return s.explain(ctx, g, r, rw, true)
}

// updateSQL checks and quotes the names of an Update and builds its statement
// (engine.PGUpdateSQL), whose arguments are the resource, the token, the set values
// and the key values, in that order.
func updateSQL(r fence.Row, set []fence.Col, bump bool) (string, error) {
	rw, setNames, err := checkRow(r, set, true)
	if err != nil {
		return "", err
	}
	return engine.PGUpdateSQL(rw.table, rw.token, rw.keyNames, setNames, bump), nil
}

// explain tells why a write changed no row: a higher token on the row (or, with
// fenceRow, in the resource's fence row) is a *fence.StaleError; otherwise the row is
// missing. It reads the committed state once more, after the write.
func (s *Store) explain(ctx context.Context, g fence.Grant, r fence.Row, rw row, fenceRow bool) error {
	var st stmt
	keys := rw.keyArgs(&st)
	st.sql.WriteString("SELECT (SELECT max(" + rw.token + ") FROM " + rw.table + " WHERE ")
	rw.where(&st, keys)
	st.sql.WriteString("), (SELECT count(*) FROM " + rw.table + " WHERE ")
	rw.where(&st, keys)
	st.sql.WriteString("), ")
	if fenceRow {
		st.sql.WriteString("(SELECT token FROM fence_tokens WHERE resource = " + st.arg(g.Resource()) + ")")
	} else {
		st.sql.WriteString("NULL::bigint")
	}
	var rowTok, fenceTok *int64
	var rows int64
	if err := s.db.QueryRow(ctx, st.sql.String(), st.args...).Scan(&rowTok, &rows, &fenceTok); err != nil {
		return writeError("look up", r.Table, err)
	}
	if rows > 1 && fenceRow {
		return fmt.Errorf("%w: the key of %q picks %d rows, not one; nothing was written", fence.ErrInvalidArgument, r.Table, rows)
	}
	seen := fence.Token(0)
	if rowTok != nil {
		seen = fence.Token(*rowTok)
	}
	if fenceTok != nil && fence.Token(*fenceTok) > seen {
		seen = fence.Token(*fenceTok)
	}
	if seen > g.Token() {
		return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
	}
	if rowTok == nil {
		return fmt.Errorf("%w: %s where %s", fence.ErrNotFound, r.Table, engine.DescribeKey(r.Key))
	}
	// The row is there with a token <= ours but was not when the write ran (it was
	// inserted concurrently): the write found nothing to change.
	return fmt.Errorf("%w: %s where %s (inserted concurrently)", fence.ErrNotFound, r.Table, engine.DescribeKey(r.Key))
}

// Upsert is fence's single-row Upsert in one INSERT ... ON CONFLICT statement; the
// key columns must be exactly a primary key or unique index. No column to set is
// allowed: the row is then its key and token.
func (s *Store) Upsert(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("upsert", &err)
	c, err := s.checkSingle(g)
	if err != nil {
		return err
	}
	g = c
	q, err := s.statement('p', r, set, func() (string, error) { return upsertSQL(r, set) })
	if err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, q, shapeArgs([]any{g.Resource(), int64(g.Token())}, r.Key, set)...)
	if err != nil {
		if u := s.unknownOutcome("upsert", g, err); u != nil {
			return u
		}
		return writeError("upsert", r.Table, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	rw, _, err := checkRow(r, set, false)
	if err != nil {
		return err
	}
	err = s.explain(ctx, g, r, rw, true)
	if errors.Is(err, fence.ErrNotFound) {
		// Nothing higher is stored now, yet the write was refused: it lost a race to
		// a newer token that has since deleted the row; the database did not say which.
		return &fence.StaleError{Resource: g.Resource(), Presented: g.Token()}
	}
	return err
}

// upsertSQL checks and quotes the names of an Upsert and builds its statement, whose
// arguments are the resource, the token, the key values and the set values.
func upsertSQL(r fence.Row, set []fence.Col) (string, error) {
	rw, setNames, err := checkRow(r, set, false)
	if err != nil {
		return "", err
	}
	var st stmt
	res, tok := st.arg(nil), st.arg(nil)
	keys := rw.keyArgs(&st)
	vals := make([]string, len(set))
	for i := range set {
		vals[i] = st.arg(nil)
	}
	// The fence is not raised past a row holding a higher token, so a refused write
	// leaves the fence row as it was.
	var cond stmt
	cond.sql.WriteString("NOT EXISTS (SELECT 1 FROM " + rw.table + " WHERE ")
	rw.where(&cond, keys)
	cond.sql.WriteString(" AND " + rw.token + " > " + tok + ")")
	st.sql.WriteString(engine.PGFenceCTE(res, tok, cond.sql.String()))

	cols := append(append(append([]string{}, rw.keyNames...), setNames...), rw.token)
	st.sql.WriteString("INSERT INTO " + rw.table + " AS fencegate_target (" + strings.Join(cols, ", ") + ") SELECT ")
	st.sql.WriteString(strings.Join(append(append(append([]string{}, keys...), vals...), tok), ", "))
	st.sql.WriteString(" WHERE EXISTS (SELECT 1 FROM fencegate_raised) ON CONFLICT (" + strings.Join(rw.keyNames, ", ") + ") DO UPDATE SET ")
	for _, c := range setNames {
		st.sql.WriteString(c + " = EXCLUDED." + c + ", ")
	}
	st.sql.WriteString(rw.token + " = EXCLUDED." + rw.token + " WHERE fencegate_target." + rw.token + " <= EXCLUDED." + rw.token)
	return st.sql.String(), nil
}

// Delete is fence's single-row Delete in one statement.
func (s *Store) Delete(ctx context.Context, g fence.Grant, r fence.Row) (err error) {
	defer s.observe("delete", &err)
	c, err := s.checkSingle(g)
	if err != nil {
		return err
	}
	g = c
	q, err := s.statement('d', r, nil, func() (string, error) { return deleteSQL(r) })
	if err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, q, shapeArgs([]any{g.Resource(), int64(g.Token())}, r.Key)...)
	if err != nil {
		if u := s.unknownOutcome("delete", g, err); u != nil {
			return u
		}
		return writeError("delete", r.Table, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	rw, _, err := checkRow(r, nil, false)
	if err != nil {
		return err
	}
	return s.explain(ctx, g, r, rw, true)
}

// deleteSQL checks and quotes the names of a Delete and builds its statement, whose
// arguments are the resource, the token and the key values.
func deleteSQL(r fence.Row) (string, error) {
	rw, _, err := checkRow(r, nil, false)
	if err != nil {
		return "", err
	}
	var st stmt
	res, tok := st.arg(nil), st.arg(nil)
	keys := rw.keyArgs(&st)
	var match stmt
	rw.where(&match, keys)
	match.sql.WriteString(" AND " + rw.token + " <= " + tok)
	var one stmt
	rw.where(&one, keys)
	// Exactly one row: a key that picks several deletes nothing.
	st.sql.WriteString(engine.PGFenceCTE(res, tok, "EXISTS (SELECT 1 FROM "+rw.table+" WHERE "+match.sql.String()+
		") AND (SELECT count(*) FROM "+rw.table+" WHERE "+one.sql.String()+") = 1"))
	st.sql.WriteString("DELETE FROM " + rw.table + " WHERE " + match.sql.String() + " AND EXISTS (SELECT 1 FROM fencegate_raised)")
	return st.sql.String(), nil
}

// checkSingle is check for a single-row write: a fence.Set grant is refused.
func (s *Store) checkSingle(g fence.Grant) (*engine.Checked, error) {
	if s == nil || s.db == nil {
		return nil, fmt.Errorf("%w: pgxfence: nil DB", fence.ErrInvalidArgument)
	}
	return engine.CheckOne(g)
}
