package mysqltest_test

import (
	"database/sql"
	"os"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
)

var server = mysqltest.New()

func TestMain(m *testing.M) {
	code := m.Run()
	if err := server.Close(); err != nil {
		println(err.Error())
	}
	os.Exit(code)
}

// TestServer_DSN_freshDatabases checks that each test gets its own empty database on
// one running server.
func TestServer_DSN_freshDatabases(t *testing.T) {
	var names []string
	for range 2 {
		db, err := sql.Open("mysql", server.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		var name string
		if err := db.QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		var tables int
		if err := db.QueryRowContext(t.Context(),
			"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Fatalf("database %s has %d tables, want a fresh one", name, tables)
		}
		if _, err := db.ExecContext(t.Context(), "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if names[0] == names[1] {
		t.Fatalf("two DSNs share database %s", names[0])
	}
}

// TestServer_DSN_skipsWithoutServer: an unreachable server skips the test with the
// reason (CI unset) rather than failing it or hanging.
func TestServer_DSN_skipsWithoutServer(t *testing.T) {
	if os.Getenv("CI") != "" {
		t.Skip("CI is set: DSN would fail the test, which is the point there")
	}
	t.Setenv(mysqltest.EnvDSN, "nobody:x@tcp(127.0.0.1:1)/")
	s := mysqltest.New()
	t.Cleanup(func() { s.Close() })
	skipped := false
	t.Run("unreachable", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		s.DSN(t)
		t.Error("DSN returned without a server")
	})
	if !skipped {
		t.Fatal("DSN did not skip the test")
	}
}
