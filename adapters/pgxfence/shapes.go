package pgxfence

import (
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// A Store keeps the SQL of its single-row writes and guarded takes by shape (the
// operation, the table, the token or counter column, the key and set column names, in
// order; engine.ShapeMap). A write of a kept shape skips checking and quoting its names
// and building its statement, client-side work that shows next to the same statement
// written by hand (BENCHMARKS.md).

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
// (which checks the names) and keeps it. A shape that fails its checks is never kept.
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

// shapeArgs returns the arguments of a kept statement: first (the token, or the
// resource and the token), then the key or set values in the order the statement
// numbers them.
func shapeArgs(first []any, cols ...[]fence.Col) []any {
	n := len(first)
	for _, cs := range cols {
		n += len(cs)
	}
	args := make([]any, 0, n)
	args = append(args, first...)
	for _, cs := range cols {
		for _, c := range cs {
			args = append(args, c.Value)
		}
	}
	return args
}
