package pgxfence_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/nolock"
)

// hostile are names and values that would end a badly quoted identifier or
// literal and run SQL of their own.
var hostile = []string{
	`x'y`, `x"y`, "x`y", "x;y", "x -- y", "x /* y */", `x\y`, `x\'y`, "ünï 😀", "\u202ex", "x?y", "x$1", "x%sy",
	`x""`, "x'); DROP TABLE canary; --", `x"; DROP TABLE canary; --`, "x$$; DROP TABLE canary; $$",
}

// TestStore_builders_hostileNames sends every hostile string as a table name, a
// key column, a value column, a key value, a set value and a resource through
// every builder (Insert, Update, Upsert, Decrement, Delete): each must name
// exactly what it says (the writes land where they should, with the values
// given) and a canary table must survive. Names with a NUL byte are refused by
// every builder before anything is sent.
func TestStore_builders_hostileNames(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(map[bool]string{false: "fence-first", true: "pipelined"}[pipelined], func(t *testing.T) {
			pool := newPool(t)
			ctx := t.Context()
			var opts []pgxfence.Option
			if !pipelined {
				opts = append(opts, pgxfence.WithFenceFirst())
			}
			s, err := pgxfence.New(pool, opts...)
			if err != nil {
				t.Fatal(err)
			}
			quote := func(name string) string { return pgx.Identifier{name}.Sanitize() }
			mustExec(t, pool, "CREATE TABLE canary (id INT PRIMARY KEY); INSERT INTO canary VALUES (1)")
			for i, h := range hostile {
				tbl, kc, vc := h, h+"k", h+"v"
				mustExec(t, pool, "CREATE TABLE "+quote(tbl)+" ("+quote(kc)+" text PRIMARY KEY, "+
					quote(vc)+" text NOT NULL, n bigint NOT NULL DEFAULT 10, fence_token bigint NOT NULL DEFAULT 0)")
				row := fence.Row{Table: tbl, Key: []fence.Col{{Name: kc, Value: h}}}
				tok := fence.Token(10 * (i + 1))
				g := func(n fence.Token) fence.Grant { return fence.NewGrant(h, tok+n) }
				if err := s.Insert(ctx, tbl, fence.Col{Name: kc, Value: h}, fence.Col{Name: vc, Value: "insert " + h}); err != nil {
					t.Fatalf("%q: Insert: %v", h, err)
				}
				if err := s.Update(ctx, g(1), row, fence.Col{Name: vc, Value: "update " + h}); err != nil {
					t.Fatalf("%q: Update: %v", h, err)
				}
				if err := s.Upsert(ctx, g(2), row, fence.Col{Name: vc, Value: "upsert " + h}); err != nil {
					t.Fatalf("%q: Upsert: %v", h, err)
				}
				if _, err := s.Decrement(ctx, nolock.Counter{Table: tbl, Key: row.Key, Column: "n"}, 3); err != nil {
					t.Fatalf("%q: Decrement: %v", h, err)
				}
				var v string
				var n int64
				if err := pool.QueryRow(ctx, "SELECT "+quote(vc)+", n FROM "+quote(tbl)+" WHERE "+quote(kc)+" = $1", h).Scan(&v, &n); err != nil {
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
				// Not mustInt: its ? rewriting would change a name holding one.
				var rows int64
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+quote(tbl)).Scan(&rows); err != nil || rows != 0 {
					t.Fatalf("%q: %d rows after Delete, %v", h, rows, err)
				}
				if got := mustInt(t, pool, "SELECT token FROM fence_tokens WHERE resource = $1", h); got != int64(tok+3) {
					t.Fatalf("%q: fence row token %d, want %d", h, got, tok+3)
				}
			}
			fencetest.RefusesNUL(t, s, hostile[0], hostile[0]+"k")
			if got := mustInt(t, pool, "SELECT count(*) FROM canary"); got != 1 {
				t.Fatalf("canary holds %d rows, want 1", got)
			}
			if got := mustInt(t, pool, "SELECT count(*) FROM fence_tokens"); got != int64(len(hostile)) {
				t.Fatalf("fence_tokens holds %d rows, want %d", got, len(hostile))
			}
		})
	}
}
