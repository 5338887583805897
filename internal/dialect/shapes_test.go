package dialect_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/internal/dialect"
)

func key(names ...string) []byte {
	var k []byte
	for _, n := range names {
		k = dialect.AppendShapeName(k, n)
	}
	return k
}

// TestAppendName_unambiguous: names that concatenate to the same bytes, or that hold
// what a separator would be, make different keys.
func TestAppendName_unambiguous(t *testing.T) {
	pairs := [][2][]byte{
		{key("ab", "c"), key("a", "bc")},
		{key("a\x00b"), key("a", "b")},
		{key("t", "n", "id"), key("t\x01n", "id")},
		{dialect.AppendShapeLen(key("t", "k1", "k2"), 2), dialect.AppendShapeLen(key("t", "k1"), 1)},
		{key(""), key()},
	}
	for i, p := range pairs {
		if string(p[0]) == string(p[1]) {
			t.Errorf("pair %d: both keys are %q", i, p[0])
		}
	}
}

func TestMap_Store(t *testing.T) {
	var c dialect.ShapeMap[string]
	if _, ok := c.Load(key("t")); ok {
		t.Fatal("Load() on an empty map found a value")
	}
	if v, ok := c.Store(string(key("t")), "first", nil); v != "first" || !ok {
		t.Fatalf("Store() = %q, %v; want first, true", v, ok)
	}
	// Kept: a second Store without replace returns the first value.
	if v, ok := c.Store(string(key("t")), "second", nil); v != "first" || !ok {
		t.Fatalf("Store() again = %q, %v; want first, true", v, ok)
	}
	// replace decides.
	if v, _ := c.Store(string(key("t")), "third", func(old string) bool { return old == "first" }); v != "third" {
		t.Fatalf("Store() with replace = %q, want third", v)
	}
	if v, ok := c.Load(key("t")); v != "third" || !ok {
		t.Fatalf("Load() = %q, %v; want third, true", v, ok)
	}
}

// TestMap_bound: past MaxShapes a new shape is not kept, and kept ones stay.
func TestMap_bound(t *testing.T) {
	var c dialect.ShapeMap[int]
	for i := range dialect.MaxShapes {
		if _, ok := c.Store(fmt.Sprint(i), i, nil); !ok {
			t.Fatalf("Store(%d) not kept below the bound", i)
		}
	}
	if !c.Full() {
		t.Fatal("Full() = false with MaxShapes shapes kept")
	}
	if v, ok := c.Store("new", -1, nil); ok || v != -1 {
		t.Fatalf("Store() past the bound = %d, %v; want -1, false", v, ok)
	}
	if _, ok := c.Load([]byte("new")); ok {
		t.Fatal("a shape past the bound was kept")
	}
	if v, ok := c.Store("7", 70, nil); !ok || v != 7 {
		t.Fatalf("Store() of a kept shape on a full map = %d, %v; want 7, true", v, ok)
	}
}

// TestMap_concurrent: readers and writers at once (run under -race); every shape ends
// with the one value stored for it.
func TestMap_concurrent(t *testing.T) {
	var c dialect.ShapeMap[string]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				k := key(fmt.Sprint(i % 50))
				if v, ok := c.Load(k); ok && v != fmt.Sprint(i%50) {
					t.Errorf("goroutine %d: Load() = %q", g, v)
				}
				c.Store(string(k), fmt.Sprint(i%50), nil)
			}
		})
	}
	wg.Wait()
	for i := range 50 {
		if v, ok := c.Load(key(fmt.Sprint(i))); !ok || v != fmt.Sprint(i) {
			t.Fatalf("Load(%d) = %q, %v", i, v, ok)
		}
	}
}
