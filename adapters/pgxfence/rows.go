package pgxfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/nolockpath"
	"github.com/fencegate/fencegate/internal/pgsql"
)

// Update is the [fence] package doc's single-row Update, in one statement: a CTE raises
// the fence row before the UPDATE locks the row, as Fenced does. It first raises an
// existing fence row by a plain UPDATE, then by the upsert that also inserts it.
func (s *Store) Update(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("update", &err)
	c, err := s.check(g, true)
	if err != nil {
		return err
	}
	args := shapeArgs(c, set, r.Key)
	for _, op := range []byte{'U', 'u'} {
		q, err := s.statement(op, r, set, func() (string, error) { return updateSQL(r, set, op == 'U') })
		if err != nil {
			return err
		}
		if done, err := s.write(ctx, "update", c, r, q, args); done || err != nil {
			return err
		}
	}
	return s.explain(ctx, c, r, set, true)
}

// updateSQL's arguments: the resource, the token, the set values, the key values.
func updateSQL(r fence.Row, set []fence.Col, bump bool) (string, error) {
	row, err := dialect.CheckRow(dialect.Postgres, r, set, true)
	if err != nil {
		return "", err
	}
	return pgsql.UpdateSQL(row.Table, row.Token, row.Keys, row.Set, bump), nil
}

// write runs a single-row write's one statement; done reports that it changed a row.
func (s *Store) write(ctx context.Context, op string, g *grant.Checked, r fence.Row, q string, args []any) (done bool, err error) {
	tag, err := s.db.Exec(ctx, q, s.mode(args)...)
	if err != nil {
		if u := s.unknownOutcome(op, g, err); u != nil {
			return false, u
		}
		return false, rowError(op, r, err)
	}
	return tag.RowsAffected() > 0, nil
}

// explain reads why a write changed no row: a higher token on the row or the fence
// row is a *fence.StaleError, else the row is missing.
func (s *Store) explain(ctx context.Context, g *grant.Checked, r fence.Row, set []fence.Col, needSet bool) error {
	row, err := dialect.CheckRow(dialect.Postgres, r, set, needSet)
	if err != nil {
		return err
	}
	var rowTok, fenceTok *int64
	var rows int64
	q := pgsql.ExplainSQL(row.Table, row.Token, row.Keys)
	if err := s.db.QueryRow(ctx, q, s.mode(append(row.KeyVals, g.Resource()))...).Scan(&rowTok, &rows, &fenceTok); err != nil {
		return rowError("look up", r, err)
	}
	if rows > 1 {
		return fmt.Errorf("%w: the key of %q picks %d rows, not one; nothing was written", fence.ErrInvalidArgument, r.Table, rows)
	}
	seen := max(deref(rowTok), deref(fenceTok))
	switch {
	case seen > g.Token():
		return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
	case rowTok == nil:
		return fmt.Errorf("%w: %s where %s", fence.ErrNotFound, r.Table, nolockpath.DescribeKey(r.Key))
	}
	// There now with a token <= ours, not when the write ran: inserted concurrently.
	return fmt.Errorf("%w: %s where %s (inserted concurrently)", fence.ErrNotFound, r.Table, nolockpath.DescribeKey(r.Key))
}

func deref(t *int64) fence.Token {
	if t == nil {
		return 0
	}
	return fence.Token(*t)
}

// Upsert is fence's single-row Upsert, one INSERT ... ON CONFLICT on the key (exactly a
// primary key or unique index); with no column to set the row is its key and token.
func (s *Store) Upsert(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("upsert", &err)
	c, err := s.check(g, true)
	if err != nil {
		return err
	}
	q, err := s.statement('p', r, set, func() (string, error) { return upsertSQL(r, set) })
	if err != nil {
		return err
	}
	if done, err := s.write(ctx, "upsert", c, r, q, shapeArgs(c, r.Key, set)); done || err != nil {
		return err
	}
	err = s.explain(ctx, c, r, set, false)
	if errors.Is(err, fence.ErrNotFound) {
		// Refused, yet nothing higher stored now: a newer token deleted the row.
		return &fence.StaleError{Resource: c.Resource(), Presented: c.Token()}
	}
	return err
}

// upsertSQL's arguments: resource, token, key values, set values.
func upsertSQL(r fence.Row, set []fence.Col) (string, error) {
	row, err := dialect.CheckRow(dialect.Postgres, r, set, false)
	if err != nil {
		return "", err
	}
	return pgsql.UpsertSQL(row.Table, row.Token, row.Keys, row.Set), nil
}

// Delete is fence's single-row Delete in one statement.
func (s *Store) Delete(ctx context.Context, g fence.Grant, r fence.Row) (err error) {
	defer s.observe("delete", &err)
	c, err := s.check(g, true)
	if err != nil {
		return err
	}
	q, err := s.statement('d', r, nil, func() (string, error) { return deleteSQL(r) })
	if err != nil {
		return err
	}
	if done, err := s.write(ctx, "delete", c, r, q, shapeArgs(c, r.Key)); done || err != nil {
		return err
	}
	return s.explain(ctx, c, r, nil, false)
}

// deleteSQL's arguments: resource, token, key values.
func deleteSQL(r fence.Row) (string, error) {
	row, err := dialect.CheckRow(dialect.Postgres, r, nil, false)
	if err != nil {
		return "", err
	}
	return pgsql.DeleteSQL(row.Table, row.Token, row.Keys), nil
}

// A Store keeps its writes' and guarded takes' SQL by shape (op, table, token or
// counter column, key and set names; dialect.ShapeMap): no checks or building again.

// shapeKey appends the shape of a write to buf.
func shapeKey(buf []byte, op byte, r fence.Row, set []fence.Col) []byte {
	buf = append(buf, op)
	buf = dialect.AppendShapeName(buf, r.Table)
	buf = dialect.AppendShapeName(buf, r.TokenColumn)
	buf = dialect.AppendShapeLen(buf, len(r.Key))
	for _, k := range r.Key {
		buf = dialect.AppendShapeName(buf, k.Name)
	}
	for _, c := range set {
		buf = dialect.AppendShapeName(buf, c.Name)
	}
	return buf
}

// statement returns the shape's kept statement, or builds (checking names) and keeps
// it; a shape that fails its checks is never kept.
func (s *Store) statement(op byte, r fence.Row, set []fence.Col, build func() (string, error)) (string, error) {
	var buf [256]byte
	key := shapeKey(buf[:0], op, r, set)
	if q, ok := s.shapes.Load(key); ok {
		return q, nil
	}
	q, err := build()
	if err != nil {
		return "", err
	}
	q, _ = s.shapes.Store(string(key), q, nil)
	return q, nil
}

// shapeArgs is the resource and the token, then cols' values in the statement's order.
func shapeArgs(g fence.Grant, cols ...[]fence.Col) []any {
	n := 2
	for _, cs := range cols {
		n += len(cs)
	}
	args := append(make([]any, 0, n), g.Resource(), int64(g.Token()))
	for _, cs := range cols {
		for _, c := range cs {
			args = append(args, c.Value)
		}
	}
	return args
}
