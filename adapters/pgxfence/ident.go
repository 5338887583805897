package pgxfence

import (
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// stmt is a single-row write being built: the SQL and its parameters.
type stmt struct {
	sql  strings.Builder
	args []any
}

// placeholders holds "$1".."$64", so that building a statement does not format them.
var placeholders = func() (p [64]string) {
	for i := range p {
		p[i] = "$" + strconv.Itoa(i+1)
	}
	return p
}()

// arg adds a parameter and returns its placeholder.
func (s *stmt) arg(v any) string {
	s.args = append(s.args, v)
	if n := len(s.args); n <= len(placeholders) {
		return placeholders[n-1]
	}
	return "$" + strconv.Itoa(len(s.args))
}

// write appends parts to the statement's SQL.
func (s *stmt) write(parts ...string) {
	for _, p := range parts {
		s.sql.WriteString(p)
	}
}

// row is a fence.Row checked and quoted.
type row struct {
	table    string   // quoted, possibly schema-qualified
	keyNames []string // quoted
	keyVals  []any
	token    string // quoted token column
}

// checkRow validates r and the columns to set, and quotes every name
// (engine.CheckRow); it returns the quoted set columns too.
func checkRow(r fence.Row, set []fence.Col, needSet bool) (row, []string, error) {
	er, err := engine.CheckRow(engine.Postgres, r, set, needSet)
	if err != nil {
		return row{}, nil, err
	}
	return row{table: er.Table, keyNames: er.Keys, keyVals: er.KeyVals, token: er.Token}, er.Set, nil
}

// where writes "k1 = $a AND k2 = $b" for the row's key.
func (r row) where(s *stmt, keyArgs []string) {
	for i, k := range r.keyNames {
		if i > 0 {
			s.sql.WriteString(" AND ")
		}
		s.write(k, " = ", keyArgs[i])
	}
}

func (r row) keyArgs(s *stmt) []string {
	out := make([]string, len(r.keyVals))
	for i, v := range r.keyVals {
		out[i] = s.arg(v)
	}
	return out
}

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
