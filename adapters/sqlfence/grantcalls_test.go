package sqlfence_test

import (
	"context"
	"database/sql"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// countingGrant is a lock-like grant (Leased, Watched, with a Context) that counts
// calls of each of its methods: a write that checks it once calls each once.
type countingGrant struct {
	res   string
	tok   fence.Token
	mu    sync.Mutex
	calls map[string]int
}

func newCountingGrant(res string, tok fence.Token) *countingGrant {
	return &countingGrant{res: res, tok: tok, calls: map[string]int{}}
}

func (g *countingGrant) count(m string) {
	g.mu.Lock()
	g.calls[m]++
	g.mu.Unlock()
}

func (g *countingGrant) Resource() string         { g.count("Resource"); return g.res }
func (g *countingGrant) Token() fence.Token       { g.count("Token"); return g.tok }
func (g *countingGrant) Lease() time.Duration     { g.count("Lease"); return 10 * time.Second }
func (g *countingGrant) Done() <-chan struct{}    { g.count("Done"); return nil }
func (g *countingGrant) Context() context.Context { g.count("Context"); return context.Background() }

func (g *countingGrant) snapshot() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.calls)
}

// countingSet is a countingGrant over several resources (a fence.Set).
type countingSet struct {
	*countingGrant
	set []string
}

func (g *countingSet) Resources() []string { g.count("Resources"); return g.set }

// TestStore_grantCheckedOnce: fence.Exec, a direct Fenced and Update each ask the
// grant once per method (one check), on every database.
func TestStore_grantCheckedOnce(t *testing.T) {
	for _, db := range []struct {
		name string
		open func(testing.TB) (*sql.DB, string)
		d    migrations.Dialect
	}{
		{"postgres", postgresDB, migrations.Postgres},
		{"mysql", mysqlDB, migrations.MySQL},
		{"sqlite", sqliteDB, migrations.SQLite},
	} {
		t.Run(db.name, func(t *testing.T) {
			conn, _ := db.open(t)
			mustExec(t, conn, "CREATE TABLE counted (id int PRIMARY KEY, v int NOT NULL, fence_token bigint NOT NULL DEFAULT 0)")
			mustExec(t, conn, "INSERT INTO counted VALUES (1, 0, 0)")
			countCalls(t, newStore(conn, db.d))
		})
	}
}

func countCalls(t *testing.T, s *sqlfence.Store) {
	ctx := t.Context()
	write := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE counted SET v = v + 1 WHERE id = 1")
		return err
	}
	row := fence.Row{Table: "counted", Key: []fence.Col{{Name: "id", Value: 1}}}
	lock := []string{"Resource", "Token", "Lease", "Done", "Context"}
	tests := []struct {
		name  string
		set   bool
		write func(g fence.Grant) error
	}{
		{"fence.Exec", false, func(g fence.Grant) error { return fence.Exec(ctx, s, g, write) }},
		{"fence.Exec, a set", true, func(g fence.Grant) error { return fence.Exec(ctx, s, g, write) }},
		{"Fenced", false, func(g fence.Grant) error { return s.Fenced(ctx, g, write) }},
		{"Update", false, func(g fence.Grant) error { return s.Update(ctx, g, row, fence.Col{Name: "v", Value: 7}) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCountingGrant("counted-1", fence.Token(10+i))
			var g fence.Grant = c
			want := lock
			if tt.set {
				g = &countingSet{c, []string{"counted-1", "counted-2"}}
				want = append(want[:len(want):len(want)], "Resources")
			}
			if err := tt.write(g); err != nil {
				t.Fatal(err)
			}
			got := c.snapshot()
			for _, m := range want {
				if got[m] != 1 {
					t.Errorf("%s called %d times, want once (all calls: %v)", m, got[m], got)
				}
			}
		})
	}
}
