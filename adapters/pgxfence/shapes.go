package pgxfence

import (
	"strings"
	"sync"

	"github.com/fencegate/fencegate/fence"
)

// maxShapes bounds how many statements a Store keeps. Past it, a write of a shape not
// yet kept builds its statement on every call, as if there were no cache: names built
// at run time (a table per tenant) cannot grow a Store without bound.
const maxShapes = 256

// shapes keeps the SQL of single-row writes and guarded takes by their shape: the
// operation, the table, the token (or counter) column and the key and set column
// names, in order. The values are not part
// of it; they go as arguments. A write of a kept shape skips checking and quoting its
// names and building its statement: on a pool at 16 workers, where the client shares
// the CPU with PostgreSQL, that client-side work cost Update 5-10 % of its throughput
// next to the same statement written by hand (BENCHMARKS.md).
type shapes struct {
	mu sync.RWMutex
	m  map[string]string
}

// shapeKey appends the shape of a write to buf: op, then the names, each ended by a
// NUL byte. A name holding a NUL would make the key ambiguous (table "a\x00b" would
// read as table "a" and token column "b"), and is refused anyway: shapeKey reports
// false for it, and the caller builds the statement, which returns the error.
func shapeKey(buf []byte, op byte, r fence.Row, set []fence.Col) ([]byte, bool) {
	ok := true
	name := func(n string) {
		ok = ok && strings.IndexByte(n, 0) < 0
		buf = append(append(buf, n...), 0)
	}
	buf = append(buf, op)
	name(r.Table)
	name(r.TokenColumn)
	for _, k := range r.Key {
		name(k.Name)
	}
	buf = append(buf, 0) // ends the key: (k1, k2 | s1) differs from (k1 | k2, s1)
	for _, c := range set {
		name(c.Name)
	}
	return buf, ok
}

// get returns the statement kept for key; nothing when ok is false (the key of a
// shape with a NUL-holding name). Indexing the map with string(key) does not
// allocate.
func (c *shapes) get(key []byte, ok bool) (string, bool) {
	if c == nil || !ok {
		return "", false
	}
	c.mu.RLock()
	q, ok := c.m[string(key)]
	c.mu.RUnlock()
	return q, ok
}

// put keeps the statement of a write that passed every check, unless the cache is full.
func (c *shapes) put(key []byte, ok bool, q string) {
	if c == nil || !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]string)
	}
	if len(c.m) < maxShapes {
		c.m[string(key)] = q
	}
}

// statement returns the kept statement of a write's shape, or builds it with build
// (which checks the names) and keeps it.
func (s *Store) statement(op byte, r fence.Row, set []fence.Col, build func() (string, error)) (string, error) {
	var buf [256]byte
	key, named := shapeKey(buf[:0], op, r, set)
	if q, ok := s.shapes.get(key, named); ok {
		return q, nil
	}
	q, err := build()
	if err == nil {
		s.shapes.put(key, named, q)
	}
	return q, err
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
