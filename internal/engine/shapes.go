package engine

import (
	"encoding/binary"
	"maps"
	"sync"
	"sync/atomic"
)

// MaxShapes bounds how many shapes a ShapeMap keeps. Past it, a shape not yet kept is built on
// every call, as if there were no cache: names made at run time (a table per tenant)
// cannot grow an adapter's Store without bound. Nothing is evicted: a caller may be
// using it.
const MaxShapes = 256

// AppendShapeLen appends a count to a key, such as the number of key columns before the set
// columns, so that (k1, k2 | s1) and (k1 | k2, s1) differ.
func AppendShapeLen(key []byte, n int) []byte { return binary.AppendUvarint(key, uint64(n)) }

// AppendShapeName appends one name to a key: its length, then its bytes. A key is looked up
// before the names are checked, so it must be unambiguous for any names, even those
// the check will refuse: with a separator byte, table "a\x00b" would spell the key of
// table "a" and column "b".
func AppendShapeName(key []byte, name string) []byte {
	return append(AppendShapeLen(key, len(name)), name...)
}

// ShapeMap is a bounded map from shape keys to what is kept for them. Readers load an
// immutable map and take no lock; a writer copies it, at most MaxShapes times. The zero ShapeMap
// is empty and ready; it is safe for concurrent use.
type ShapeMap[V any] struct {
	m  atomic.Pointer[map[string]V]
	mu sync.Mutex // writers
}

// Load returns the value kept for key. Indexing with string(key) does not allocate,
// so a lookup with a key built in a stack buffer allocates nothing.
func (c *ShapeMap[V]) Load(key []byte) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[string(key)]
		return v, ok
	}
	var zero V
	return zero, false
}

// Full reports whether the map keeps MaxShapes shapes.
func (c *ShapeMap[V]) Full() bool {
	m := c.m.Load()
	return m != nil && len(*m) >= MaxShapes
}

// Store keeps v under key and returns it with true. When a value is kept under key
// already, that value is kept and returned instead, unless replace (nil: never)
// says v should replace it. When the map is full and holds nothing under key, v is
// returned with false: nothing is kept.
func (c *ShapeMap[V]) Store(key string, v V, replace func(old V) bool) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string]V
	if m := c.m.Load(); m != nil {
		old = *m
	}
	if have, ok := old[key]; ok {
		if replace == nil || !replace(have) {
			return have, true
		}
	} else if len(old) >= MaxShapes {
		return v, false
	}
	next := make(map[string]V, len(old)+1)
	maps.Copy(next, old)
	next[key] = v
	c.m.Store(&next)
	return v, true
}
