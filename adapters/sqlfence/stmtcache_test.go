package sqlfence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

// decrement takes n from c through s and fails t unless want is left.
func decrement(t *testing.T, s *sqlfence.Store, c nolock.Counter, n, want int64) {
	t.Helper()
	if left, err := s.Decrement(t.Context(), c, n); err != nil || left != want {
		t.Fatalf("Decrement(%v, %d) = %d, %v; want %d", c, n, left, err, want)
	}
}

func stockCounter(table string, id int) nolock.Counter {
	return nolock.Counter{Table: table, Key: []fence.Col{{Name: "id", Value: id}}, Column: "n"}
}

// TestStore_Decrement_concurrentShapes: workers take through one Store from their own
// rows of two tables (two shapes) and from one hot row; every own take succeeds, the
// hot row sells exactly what it held and refuses the rest as insufficient.
func TestStore_Decrement_concurrentShapes(t *testing.T) {
	const workers, takes = 8, 25
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		db.SetMaxOpenConns(noLockConns)
		hot := workers * takes / 2
		for _, tbl := range []string{"stock_a", "stock_b"} {
			mustExec(t, db, "CREATE TABLE "+tbl+" (id INT PRIMARY KEY, n BIGINT NOT NULL)")
			for w := range workers {
				nlExec(t, db, d, "INSERT INTO "+tbl+" (id, n) VALUES (?, ?)", w, takes)
			}
		}
		nlExec(t, db, d, "INSERT INTO stock_a (id, n) VALUES (?, ?)", workers, hot)

		var sold, refused atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				ctx := t.Context()
				for i := range takes {
					for _, tbl := range []string{"stock_a", "stock_b"} {
						left, err := s.Decrement(ctx, stockCounter(tbl, w), 1)
						if want := int64(takes - i - 1); err != nil || left != want {
							t.Errorf("%s row %d: Decrement = %d, %v; want %d", tbl, w, left, err, want)
							return
						}
					}
					_, err := s.Decrement(ctx, stockCounter("stock_a", workers), 1)
					switch {
					case err == nil:
						sold.Add(1)
					case errors.Is(err, nolock.ErrInsufficient):
						refused.Add(1)
					default:
						t.Errorf("hot row: Decrement = %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		if sold.Load() != int64(hot) || refused.Load() != int64(workers*takes-hot) {
			t.Fatalf("hot row: %d sold, %d refused; want %d, %d", sold.Load(), refused.Load(), hot, workers*takes-hot)
		}
		for _, tbl := range []string{"stock_a", "stock_b"} {
			if got := queryInt(t, db, "SELECT SUM(n) FROM "+tbl); got != 0 {
				t.Errorf("%s: %d left in all, want 0", tbl, got)
			}
		}
	})
}

// TestStore_Decrement_schemaChange: a cached shape (a prepared statement on SQLite)
// keeps working when its table is missing at first, dropped and re-created with the
// counter in another position, and altered.
func TestStore_Decrement_schemaChange(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		c := stockCounter("stock", 1)
		if _, err := s.Decrement(t.Context(), c, 1); err == nil || errors.Is(err, fence.ErrInvalidArgument) {
			t.Fatalf("Decrement on a missing table = %v, want the driver's error", err)
		}
		mustExec(t, db, "CREATE TABLE stock (id INT PRIMARY KEY, n BIGINT NOT NULL)")
		nlExec(t, db, d, "INSERT INTO stock (id, n) VALUES (?, ?)", 1, 10)
		decrement(t, s, c, 3, 7)
		decrement(t, s, c, 1, 6)

		mustExec(t, db, "DROP TABLE stock")
		if _, err := s.Decrement(t.Context(), c, 1); err == nil {
			t.Fatal("Decrement on a dropped table succeeded")
		}
		mustExec(t, db, "CREATE TABLE stock (note VARCHAR(20), n BIGINT NOT NULL, id INT PRIMARY KEY)")
		nlExec(t, db, d, "INSERT INTO stock (note, n, id) VALUES (?, ?, ?)", "x", 100, 1)
		decrement(t, s, c, 5, 95)

		mustExec(t, db, "DROP TABLE stock")
		mustExec(t, db, "CREATE TABLE stock (id INT PRIMARY KEY, extra BIGINT NOT NULL, n BIGINT NOT NULL)")
		nlExec(t, db, d, "INSERT INTO stock (id, extra, n) VALUES (?, ?, ?)", 1, 7, 50)
		decrement(t, s, c, 5, 45) // dropped and re-created with no call between

		mustExec(t, db, "ALTER TABLE stock ADD COLUMN later INT DEFAULT 0")
		decrement(t, s, c, 5, 40)
		if left, err := s.Decrement(t.Context(), c, 41); !errors.Is(err, nolock.ErrInsufficient) || left != 40 {
			t.Fatalf("Decrement of 41 = %d, %v; want 40 left and nolock.ErrInsufficient", left, err)
		}
		if got := queryInt(t, db, "SELECT extra FROM stock"); got != 7 {
			t.Fatalf("extra = %d, want 7: the take wrote the wrong column", got)
		}
	})
}

// TestStore_Decrement_shapesApart: shapes that differ only in the table name or in
// the order of the key columns each get their own SQL, bound to their own values.
func TestStore_Decrement_shapesApart(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		for _, tbl := range []string{"stock_a", "stock_b"} {
			mustExec(t, db, "CREATE TABLE "+tbl+" (x INT NOT NULL, y INT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (x, y))")
			// (2, 1) is where (1, 2)'s values land if bound in the wrong order.
			nlExec(t, db, d, "INSERT INTO "+tbl+" (x, y, n) VALUES (1, 2, 100), (2, 1, 1000)")
		}
		xy := func(tbl string) nolock.Counter {
			return nolock.Counter{Table: tbl, Key: []fence.Col{{Name: "x", Value: 1}, {Name: "y", Value: 2}}, Column: "n"}
		}
		yx := func(tbl string) nolock.Counter {
			return nolock.Counter{Table: tbl, Key: []fence.Col{{Name: "y", Value: 2}, {Name: "x", Value: 1}}, Column: "n"}
		}
		for i := range int64(3) {
			decrement(t, s, xy("stock_a"), 1, 99-2*i)
			decrement(t, s, yx("stock_a"), 1, 98-2*i)
			decrement(t, s, xy("stock_b"), 10, 90-10*i)
		}
		for _, tbl := range []string{"stock_a", "stock_b"} {
			if got := nlInt(t, db, d, "SELECT n FROM "+tbl+" WHERE x = 2"); got != 1000 {
				t.Errorf("%s (2, 1) = %d, want 1000 untouched", tbl, got)
			}
		}
	})
}

// TestStore_Decrement_badShapeEveryCall: a counter that fails the checks fails on
// every call, also after a valid shape that looks alike is cached.
func TestStore_Decrement_badShapeEveryCall(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		mustExec(t, db, "CREATE TABLE stock (id INT PRIMARY KEY, n BIGINT NOT NULL)")
		nlExec(t, db, s.Dialect(), "INSERT INTO stock (id, n) VALUES (?, ?)", 1, 10)
		decrement(t, s, stockCounter("stock", 1), 1, 9)
		key := []fence.Col{{Name: "id", Value: 1}}
		tests := []struct {
			name string
			c    nolock.Counter
			want error
		}{
			// The valid shape's names joined by NUL bytes: a key with plain
			// separators would find its statement.
			{"NUL-joined look-alike", nolock.Counter{Table: "stock\x00n\x00id", Column: "n", Key: key}, fencetest.Invalid("contains a NUL byte")},
			{"NUL-joined look-alike, no key", nolock.Counter{Table: "stock\x00n", Column: "id"}, fencetest.Invalid("contains a NUL byte")},
			{"no key", nolock.Counter{Table: "stock", Column: "n"}, fence.ErrInvalidArgument},
			{"column is a key column", nolock.Counter{Table: "stock", Column: "ID", Key: key}, fence.ErrInvalidArgument},
			{"key named twice", nolock.Counter{Table: "stock", Column: "n", Key: append(key, fence.Col{Name: "Id", Value: 1})}, fence.ErrInvalidArgument},
			{"empty column", nolock.Counter{Table: "stock", Key: key}, fencetest.Invalid("invalid identifier: empty counter column name")},
		}
		for _, tt := range tests {
			for call := range 3 {
				if _, err := s.Decrement(t.Context(), tt.c, 1); !fencetest.Match(err, tt.want) {
					t.Errorf("%s, call %d: Decrement = %v, want %v", tt.name, call+1, err, tt.want)
				}
			}
		}
		if _, err := s.Decrement(t.Context(), stockCounter("stock", 1), 0); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("Decrement by 0 of a cached shape = %v, want ErrInvalidArgument", err)
		}
		decrement(t, s, stockCounter("stock", 1), 1, 8)
	})
}

// TestStore_Decrement_pastTheBound: more shapes than a Store keeps (the orders of
// seven key columns, all naming one row) all take correctly, twice over.
func TestStore_Decrement_pastTheBound(t *testing.T) {
	const cols = 7
	shapes := permutations(cols, sqlfence.MaxShapes+20)
	if len(shapes) <= sqlfence.MaxShapes {
		t.Fatalf("%d orders of %d columns, want more than %d", len(shapes), cols, sqlfence.MaxShapes)
	}
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		def, names, vals := "", "", ""
		for i := range cols {
			def += fmt.Sprintf("k%d INT NOT NULL, ", i)
			names += fmt.Sprintf("k%d, ", i)
			vals += fmt.Sprintf("%d, ", i)
		}
		mustExec(t, db, "CREATE TABLE wide ("+def+"n BIGINT NOT NULL, PRIMARY KEY (k0, k1, k2, k3, k4, k5, k6))")
		start := int64(10_000)
		mustExec(t, db, fmt.Sprintf("INSERT INTO wide (%sn) VALUES (%s%d)", names, vals, start))
		left := start
		for range 2 {
			for _, order := range shapes {
				key := make([]fence.Col, cols)
				for j, k := range order {
					key[j] = fence.Col{Name: fmt.Sprintf("k%d", k), Value: k}
				}
				left--
				decrement(t, s, nolock.Counter{Table: "wide", Key: key, Column: "n"}, 1, left)
			}
		}
		if got := queryInt(t, db, "SELECT n FROM wide"); got != left {
			t.Fatalf("n = %d, want %d", got, left)
		}
	})
}

// permutations returns up to limit orders of 0..n-1.
func permutations(n, limit int) [][]int {
	var out [][]int
	var walk func(prefix []int, used uint)
	walk = func(prefix []int, used uint) {
		if len(out) == limit {
			return
		}
		if len(prefix) == n {
			out = append(out, append([]int(nil), prefix...))
			return
		}
		for i := range n {
			if used&(1<<i) == 0 {
				walk(append(prefix, i), used|1<<i)
			}
		}
	}
	walk(nil, 0)
	return out
}

// TestStore_Decrement_cachedAllocs: on SQLite a Decrement of a cached shape allocates
// less than the first one of a Store, which checks, builds and prepares.
func TestStore_Decrement_cachedAllocs(t *testing.T) {
	db, _ := sqliteDB(t)
	mustExec(t, db, "CREATE TABLE stock (id INT PRIMARY KEY, n BIGINT NOT NULL)")
	mustExec(t, db, "INSERT INTO stock (id, n) VALUES (1, 1000000)")
	c := stockCounter("stock", 1)
	take := func(s *sqlfence.Store) {
		if _, err := s.Decrement(t.Context(), c, 1); err != nil {
			t.Fatal(err)
		}
	}
	first := testing.AllocsPerRun(20, func() { take(newStore(db, migrations.SQLite)) })
	s := newStore(db, migrations.SQLite)
	cached := testing.AllocsPerRun(20, func() { take(s) })
	if cached >= first {
		t.Fatalf("a cached Decrement allocates %.0f times, a first one %.0f: want fewer", cached, first)
	}
	t.Logf("allocations per Decrement: first %.0f, cached %.0f", first, cached)
}
