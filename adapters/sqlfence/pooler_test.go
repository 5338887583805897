package sqlfence_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
)

// TestSuite_pgbouncer runs the suite through PgBouncer in transaction pooling, with
// pgx's stdlib driver in each exec mode that prepares nothing by name (the DSN's
// default_query_exec_mode): the Store's raise is sent without parameters, its
// single-row writes and the suite's statements in the DSN's mode.
func TestSuite_pgbouncer(t *testing.T) {
	for _, mode := range []string{"cache_describe", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			via, direct := bouncer.DSNs(t)
			migrate, err := sql.Open("pgx", direct) // migrations take a session-level lock
			if err != nil {
				t.Fatal(err)
			}
			defer migrate.Close()
			if err := migrations.Up(context.Background(), migrate, migrations.Postgres); err != nil {
				t.Fatalf("migrations.Up: %v", err)
			}
			db, err := sql.Open("pgx", via+"&default_query_exec_mode="+mode)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			db.SetMaxOpenConns(32)
			store, err := sqlfence.New(db, migrations.Postgres)
			if err != nil {
				t.Fatal(err)
			}
			fencetest.Run(t, harness("postgres via pgbouncer "+mode, db, store))
		})
	}
}
