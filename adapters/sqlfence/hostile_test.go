package sqlfence_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

// hostile are names and values that would end a badly quoted identifier or
// literal and run SQL of their own. MySQL allows no identifier ending in a space
// or holding characters beyond the BMP, so none of them do.
var hostile = []string{
	`x'y`, `x"y`, "x`y", "x;y", "x -- y", "x /* y */", `x\y`, `x\'y`, "ünï", "\u202ex", "x?y", "x$1", "x%sy",
	`x""`, "x``", "x'); DROP TABLE canary; --", "x`; DROP TABLE canary; --", `x"; DROP TABLE canary; --`,
}

// TestStore_builders_hostileNames sends every hostile string as a table name, a
// key column, a value column, a key value, a set value and a resource through
// every builder (Insert, Update, Upsert, Decrement, Delete) on every database:
// each must name exactly what it says (the writes land where they should, with
// the values given) and a canary table must survive. Names with a NUL byte are
// refused by every builder before anything is sent.
func TestStore_builders_hostileNames(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		ctx := t.Context()
		ph, charset := "?", "" // the test's own placeholder; dollars() would rewrite a ? inside a quoted name
		if d == migrations.Postgres {
			ph = "$1"
		}
		if d == migrations.MySQL {
			charset = " DEFAULT CHARSET=utf8mb4" // the test database's default cannot hold U+202E
		}
		mustExec(t, db, "CREATE TABLE canary (id INT PRIMARY KEY)")
		mustExec(t, db, "INSERT INTO canary VALUES (1)")
		for i, h := range hostile {
			tbl, kc, vc := h, h+"k", h+"v"
			mustExec(t, db, "CREATE TABLE "+quote(d, tbl)+" ("+quote(d, kc)+" VARCHAR(100) PRIMARY KEY, "+
				quote(d, vc)+" VARCHAR(100) NOT NULL, n BIGINT NOT NULL DEFAULT 10, fence_token BIGINT NOT NULL DEFAULT 0)"+charset)
			row := fence.Row{Table: tbl, Key: []fence.Col{{Name: kc, Value: h}}}
			tok := fence.Token(10 * (i + 1))
			g := func(n fence.Token) fence.Grant { return fence.NewGrant(h, tok+n) }
			steps := []struct {
				what string
				err  error
			}{
				{"Insert", s.Insert(ctx, tbl, fence.Col{Name: kc, Value: h}, fence.Col{Name: vc, Value: "insert " + h})},
				{"Update", s.Update(ctx, g(1), row, fence.Col{Name: vc, Value: "update " + h})},
				{"Upsert", s.Upsert(ctx, g(2), row, fence.Col{Name: vc, Value: "upsert " + h})},
			}
			_, derr := s.Decrement(ctx, nolock.Counter{Table: tbl, Key: row.Key, Column: "n"}, 3)
			steps = append(steps, struct {
				what string
				err  error
			}{"Decrement", derr})
			for _, st := range steps {
				if st.err != nil {
					t.Fatalf("%q: %s: %v", h, st.what, st.err)
				}
			}
			var v string
			var n int64
			if err := db.QueryRowContext(ctx, "SELECT "+quote(d, vc)+", n FROM "+quote(d, tbl)+" WHERE "+quote(d, kc)+" = "+ph, h).Scan(&v, &n); err != nil {
				t.Fatalf("%q: read back: %v", h, err)
			}
			if v != "upsert "+h || n != 7 {
				t.Fatalf("%q: row holds %q, %d; want %q, 7", h, v, n, "upsert "+h)
			}
			if err := s.Delete(ctx, g(3), row); err != nil {
				t.Fatalf("%q: Delete: %v", h, err)
			}
			if err := s.Upsert(ctx, g(2), row, fence.Col{Name: vc, Value: "stale"}); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("%q: stale Upsert after Delete = %v, want ErrStale", h, err)
			}
			if got := queryInt(t, db, "SELECT count(*) FROM "+quote(d, tbl)); got != 0 {
				t.Fatalf("%q: %d rows after Delete", h, got)
			}
			var stored int64
			if err := db.QueryRowContext(ctx, "SELECT token FROM fence_tokens WHERE resource = "+ph, h).Scan(&stored); err != nil || stored != int64(tok+3) {
				t.Fatalf("%q: fence row token %d, %v; want %d", h, stored, err, tok+3)
			}
		}
		fencetest.RefusesNUL(t, s, hostile[0], hostile[0]+"k")
		if got := queryInt(t, db, "SELECT count(*) FROM canary"); got != 1 {
			t.Fatalf("canary holds %d rows, want 1", got)
		}
		if got := queryInt(t, db, "SELECT count(*) FROM fence_tokens"); got != int64(len(hostile)) {
			t.Fatalf("fence_tokens holds %d rows, want %d", got, len(hostile))
		}
	})
}
