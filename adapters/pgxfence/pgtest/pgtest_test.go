package pgtest_test

import (
	"errors"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
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

// TestServer_DSN_envOverride uses a running server named by FENCEGATE_POSTGRES_DSN
// and leaves it running on Close.
func TestServer_DSN_envOverride(t *testing.T) {
	ctx := t.Context()
	own := postgres.DSN(t)
	t.Setenv(pgtest.EnvDSN, own)
	s := pgtest.New()
	t.Run("database", func(t *testing.T) { // its cleanup drops the database before Close
		other := s.DSN(t)
		ou, _ := url.Parse(own)
		du, _ := url.Parse(other)
		if ou.Host != du.Host || ou.Path == du.Path {
			t.Fatalf("override gave %q for server %q; want a new database on the same server", other, own)
		}
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, own)
	if err != nil {
		t.Fatalf("the overriding server is gone after Close: %v", err)
	}
	conn.Close(ctx)
}

// TestServer_DSN_skipsWithoutServer checks the skip (CI unset) when the override
// names no usable server.
func TestServer_DSN_skipsWithoutServer(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv(pgtest.EnvDSN, "mysql://not-postgres")
	s := pgtest.New()
	defer s.Close()
	var skipped bool
	t.Run("inner", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		s.DSN(t)
	})
	if !skipped {
		t.Fatal("DSN did not skip without a server")
	}
}

// TestServer_Crash_restart crashes the server between two commits: the
// acknowledged one is there after Restart, the open transaction is not, and a
// Server that started nothing refuses both with ErrNotStarted.
func TestServer_Crash_restart(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) != "" {
		t.Skip("the server is " + pgtest.EnvDSN + "'s, which pgtest does not crash")
	}
	ctx := t.Context()
	srv := pgtest.New()
	t.Cleanup(func() { srv.Close() })
	if err := srv.Crash(); !errors.Is(err, pgtest.ErrNotStarted) {
		t.Fatalf("Crash before any DSN = %v; want ErrNotStarted", err)
	}
	if err := srv.Restart(ctx); !errors.Is(err, pgtest.ErrNotStarted) {
		t.Fatalf("Restart before any DSN = %v; want ErrNotStarted", err)
	}
	dsn := srv.DSN(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var sc string
	if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		t.Fatalf("synchronous_commit = %q, %v; want on", sc, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (id int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Crash(); err == nil {
		t.Fatal("Crash of a crashed server returned nil")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("a commit sent to a crashed server succeeded")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err == nil {
		t.Fatal("Restart of a running server returned nil")
	}
	again, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	var ids []int32
	rows, _ := again.Query(ctx, "SELECT id FROM kept ORDER BY id")
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil || len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("after the crash the table holds %v (%v); want the acknowledged row 1 alone", ids, err)
	}
}
