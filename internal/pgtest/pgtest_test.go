package pgtest_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/pgtest"
)

var postgres = pgtest.New()

func TestMain(m *testing.M) {
	code := m.Run()
	if err := postgres.Close(); err != nil {
		println(err.Error())
	}
	os.Exit(code)
}

// TestServer_DSN_freshDatabases checks that each DSN names its own empty database, so
// a table made by one test is invisible to the next.
func TestServer_DSN_freshDatabases(t *testing.T) {
	ctx := t.Context()
	first, second := postgres.DSN(t), postgres.DSN(t)
	if first == second {
		t.Fatalf("two calls returned the same DSN %q", first)
	}
	a, err := pgx.Connect(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if _, err := a.Exec(ctx, "CREATE TABLE only_here (id int)"); err != nil {
		t.Fatal(err)
	}
	b, err := pgx.Connect(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a table created in one test database is visible in another")
	}
	var v int
	if err := a.QueryRow(ctx, "SHOW server_version_num").Scan(new(string)); err != nil {
		t.Fatal(err)
	}
	if err := a.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil || v < 120000 {
		t.Fatalf("server_version_num = %d, %v; want PostgreSQL 12 or later", v, err)
	}
}
