package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

var (
	postgres = pgtest.New()
	mariadb  = mysqltest.New()
)

func TestMain(m *testing.M) {
	if os.Getenv(asFencectlEnv) != "" { // the test binary run as fencectl itself
		os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	for _, err := range []error{postgres.Close(), mariadb.Close()} {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// TestRun_tokens_servers reads stored tokens from PostgreSQL (pgx's driver,
// $1 placeholders) and MariaDB, picked from the DSN alone.
func TestRun_tokens_servers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dsn    func(testing.TB) string
		driver string
		md     migrations.Dialect
		sd     migrations.Dialect
	}{
		{"postgres", postgres.DSN, "pgx", migrations.Postgres, migrations.Postgres},
		{"mariadb", mariadb.DSN, "mysql", migrations.MySQL, migrations.MySQL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			var db *sql.DB
			var err error
			if tc.sd == migrations.MySQL {
				db, err = mysql.Open(dsn)
			} else {
				db, err = sql.Open(tc.driver, dsn)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := migrations.Up(context.Background(), db, tc.md); err != nil {
				t.Fatal(err)
			}
			s, err := sqlfence.New(db, tc.sd)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []fence.Grant{fence.NewGrant("acct-1", 42), fence.NewGrant("it's; DROP", 7)} {
				if err := s.Fenced(t.Context(), g, func(*sql.Tx) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := fencectl(t, "-dsn", dsn, "tokens", "it's; DROP")
			if code != 0 || !strings.Contains(out, `"it's; DROP"`) || !strings.Contains(out, "  7") {
				t.Errorf("tokens: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			code, out, errOut = fencectl(t, "-dsn", dsn, "-json", "tokens")
			if code != 0 || !strings.Contains(out, `"resource": "acct-1"`) || !strings.Contains(out, `"token": 42`) {
				t.Errorf("tokens -json: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			if code, _, errOut := fencectl(t, "-dsn", dsn, "tokens", "nope"); code != 1 || !strings.Contains(errOut, "no token stored") {
				t.Errorf("unknown resource: exit %d, stderr %q", code, errOut)
			}
		})
	}
}
