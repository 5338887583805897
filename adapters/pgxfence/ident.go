package pgxfence

import (
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// params returns the placeholders $from.. of n parameters.
func params(from, n int) []string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(from+i)
	}
	return ps
}

// eqs is "k1 = $a AND k2 = $b" for the names and their placeholders.
func eqs(names, ps []string) string {
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(k + " = " + ps[i])
	}
	return b.String()
}

// A Store keeps the SQL of its single-row writes and guarded takes by shape (the
// operation, the table, the token or counter column, the key and set column names, in
// order; engine.ShapeMap): a write of a kept shape skips checking, quoting and
// building.

// shapeKey appends the shape of a write to buf.
func shapeKey(buf []byte, op byte, r fence.Row, set []fence.Col) []byte {
	buf = append(buf, op)
	buf = engine.AppendShapeName(buf, r.Table)
	buf = engine.AppendShapeName(buf, r.TokenColumn)
	buf = engine.AppendShapeLen(buf, len(r.Key))
	for _, k := range r.Key {
		buf = engine.AppendShapeName(buf, k.Name)
	}
	for _, c := range set {
		buf = engine.AppendShapeName(buf, c.Name)
	}
	return buf
}

// statement returns the kept statement of a write's shape, or builds it with build
// (which checks the names) and keeps it; a shape that fails its checks is never kept.
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

// shapeArgs is a kept statement's arguments: the resource and the token, then the
// values of cols in the order the statement numbers them.
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
