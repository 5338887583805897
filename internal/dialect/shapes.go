package dialect

import (
	"encoding/binary"
	"maps"
	"sync"
	"sync/atomic"
)

// MaxShapes bounds a ShapeMap against names made at run time (a table per tenant);
// past it new shapes are built per call. Nothing is evicted: a caller may use it.
const MaxShapes = 256

// AppendShapeLen appends a count to a key, so (k1, k2 | s1) and (k1 | k2, s1) differ.
func AppendShapeLen(key []byte, n int) []byte { return binary.AppendUvarint(key, uint64(n)) }

// AppendShapeName appends a name's length, then bytes: keys are looked up before the
// check, so must be unambiguous even for names it refuses.
func AppendShapeName(key []byte, name string) []byte {
	return append(AppendShapeLen(key, len(name)), name...)
}

// ShapeMap is a bounded, concurrent map of shape keys: readers load an immutable map
// with no lock, writers copy it (at most MaxShapes times). The zero value is ready.
type ShapeMap[V any] struct {
	m  atomic.Pointer[map[string]V]
	mu sync.Mutex // writers
}

// Load returns the value kept for key; string(key) in an index does not allocate.
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

// Store keeps v under key and returns it with true; a kept value stays and is
// returned unless replace (nil: never) says otherwise; a full map returns v, false.
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
