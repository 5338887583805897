package pgxfence_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/nolock"
)

// TestStore_rows_keptStatements writes through one Store with shapes that differ only
// in the order of their set columns, more shapes than it keeps statements for,
// concurrently: each write must land in the columns it names, whether its statement
// was kept, reused or built again past the bound.
func TestStore_rows_keptStatements(t *testing.T) {
	pool := newPool(t)
	const cols = 20 // 20 x 19 ordered pairs of set columns: more shapes than MaxShapes
	if cols*(cols-1) <= pgxfence.MaxShapes {
		t.Fatalf("%d shapes do not exceed the bound %d", cols*(cols-1), pgxfence.MaxShapes)
	}
	ddl := "CREATE TABLE shapes (id INT PRIMARY KEY, fence_token BIGINT NOT NULL DEFAULT 0"
	for c := range cols {
		ddl += fmt.Sprintf(", c%d BIGINT NOT NULL DEFAULT 0", c)
	}
	mustExec(t, pool, ddl+")")
	mustExec(t, pool, "INSERT INTO shapes (id) SELECT g FROM generate_series(0, $1) AS g", cols-1)
	s := newStore(pool)
	ctx := t.Context()

	// Row i is written by one goroutine, twice over every pair (i, j): first c_i =
	// j and c_j = i, with the columns named in one order, then again in the other
	// order with the values swapped, under a higher token. What stays is the second.
	var wg sync.WaitGroup
	errs := make(chan error, cols)
	for i := range cols {
		wg.Go(func() {
			tok := fence.Token(1)
			row := fence.Row{Table: "shapes", Key: []fence.Col{{Name: "id", Value: i}}}
			for j := range cols {
				if j == i {
					continue
				}
				ci, cj := fmt.Sprintf("c%d", i), fmt.Sprintf("c%d", j)
				g := fence.NewGrant(fmt.Sprintf("shapes-%d", i), tok)
				if err := s.Update(ctx, g, row, fence.Col{Name: ci, Value: j}, fence.Col{Name: cj, Value: i}); err != nil {
					errs <- fmt.Errorf("row %d, (%s, %s): %w", i, ci, cj, err)
					return
				}
				g = fence.NewGrant(fmt.Sprintf("shapes-%d", i), tok+1)
				if err := s.Update(ctx, g, row, fence.Col{Name: cj, Value: 100 + j}, fence.Col{Name: ci, Value: 100 + i}); err != nil {
					errs <- fmt.Errorf("row %d, (%s, %s): %w", i, cj, ci, err)
					return
				}
				tok += 2
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range cols {
		for j := range cols {
			// The last write to row i that named c_j: j's own pass set it to 100+j,
			// unless j == i, which every pass sets to 100+i.
			if got := mustInt(t, pool, fmt.Sprintf("SELECT c%d FROM shapes WHERE id = $1", j), i); got != int64(100+j) {
				t.Fatalf("row %d c%d = %d, want %d", i, j, got, 100+j)
			}
		}
	}
}

// TestStore_rows_nulNameAfterKeptStatement: a name holding a NUL byte is refused even
// when, read with NUL as a separator, it would spell the shape of a statement the
// Store already keeps, and nothing is written.
func TestStore_rows_nulNameAfterKeptStatement(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE nul_shapes (id INT PRIMARY KEY, val BIGINT NOT NULL DEFAULT 0, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, pool, "INSERT INTO nul_shapes (id) VALUES (1)")
	s := newStore(pool)
	ctx := t.Context()
	kept := fence.Row{Table: "nul_shapes", TokenColumn: "fence_token", Key: []fence.Col{{Name: "id", Value: 1}}}
	if err := s.Update(ctx, fence.NewGrant("nul", 1), kept, fence.Col{Name: "val", Value: 7}); err != nil {
		t.Fatal(err)
	}
	hostile := []struct {
		name string
		row  fence.Row
		set  []fence.Col
	}{
		// "nul_shapes\x00fence_token" + "id" + no key spells the kept shape's names.
		{"table", fence.Row{Table: "nul_shapes\x00fence_token", TokenColumn: "id"}, []fence.Col{{Name: "val", Value: 9}}},
		{"token column", fence.Row{Table: "nul_shapes", TokenColumn: "fence_token\x00id", Key: []fence.Col{{Name: "", Value: 1}}}, []fence.Col{{Name: "val", Value: 9}}},
		{"set column", kept, []fence.Col{{Name: "val\x00", Value: 9}}},
	}
	for _, h := range hostile {
		t.Run(h.name, func(t *testing.T) {
			err := s.Update(ctx, fence.NewGrant("nul", 2), h.row, h.set...)
			if !fencetest.Match(err, fencetest.Invalid("contains a NUL byte")) {
				t.Fatalf("Update() = %v, want fence.ErrInvalidArgument for the NUL byte", err)
			}
			if got := mustInt(t, pool, "SELECT val FROM nul_shapes WHERE id = 1"); got != 7 {
				t.Fatalf("val = %d after a refused write, want 7", got)
			}
		})
	}
}

// TestStore_Decrement_nulNameAfterKeptStatement is the same for a guarded take.
func TestStore_Decrement_nulNameAfterKeptStatement(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE nul_stock (id INT PRIMARY KEY, n BIGINT NOT NULL)")
	mustExec(t, pool, "INSERT INTO nul_stock VALUES (1, 10)")
	s := newStore(pool)
	ctx := t.Context()
	kept := nolock.Counter{Table: "nul_stock", Column: "n", Key: []fence.Col{{Name: "id", Value: 1}}}
	for range 2 { // the second take runs the kept statement
		if _, err := s.Decrement(ctx, kept, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Read with NUL as a separator: table "nul_stock", counter "n", key "id".
	hostile := nolock.Counter{Table: "nul_stock\x00n", Column: "id"}
	if _, err := s.Decrement(ctx, hostile, 1); !fencetest.Match(err, fencetest.Invalid("contains a NUL byte")) {
		t.Fatalf("Decrement() = %v, want fence.ErrInvalidArgument for the NUL byte", err)
	}
	if got := mustInt(t, pool, "SELECT n FROM nul_stock WHERE id = 1"); got != 8 {
		t.Fatalf("n = %d, want 8", got)
	}
}
