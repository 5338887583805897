package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// openRaw opens dsn with the driver as given, after setting the two flags.
func openRaw(t *testing.T, dsn string, foundRows, interpolate bool) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows, cfg.InterpolateParams = foundRows, interpolate
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestMySQL_clientFoundRows: without the flag, a write of unchanged values reports
// 0 rows (the trap); the Store refuses such a pool with an error that says how to
// fix the DSN, and writes nothing. With the flag set by hand the pool is accepted.
func TestMySQL_clientFoundRows(t *testing.T) {
	db, dsn := mysqlDB(t)
	mustExec(t, db, "CREATE TABLE acct (id VARCHAR(20) PRIMARY KEY, val BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, db, "INSERT INTO acct (id, val, fence_token) VALUES ('a', 1, 5)")

	changed := openRaw(t, dsn, false, true)
	res, err := changed.ExecContext(t.Context(), "UPDATE acct SET val = 1 WHERE id = 'a'")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("without clientFoundRows an unchanged write reports %d rows; the trap this test guards is gone", n)
	}
	store := newStore(changed, migrations.MySQL)
	row := fence.Row{Table: "acct", Key: []fence.Col{fence.Col{Name: "id", Value: "a"}}}
	g := fence.NewGrant("acct", 6)
	calls := map[string]func() error{
		"Fenced": func() error {
			return store.Fenced(t.Context(), g, func(*sql.Tx) error { return errors.New("fn ran") })
		},
		"Update": func() error { return store.Update(t.Context(), g, row, fence.Col{Name: "val", Value: 2}) },
		"Upsert": func() error { return store.Upsert(t.Context(), g, row, fence.Col{Name: "val", Value: 2}) },
		"Delete": func() error { return store.Delete(t.Context(), g, row) },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "clientFoundRows=true") {
			t.Errorf("%s() = %v, want ErrInvalidArgument saying how to fix the DSN", name, err)
		}
	}
	if v, tok := queryInt(t, db, "SELECT val FROM acct"), queryInt(t, db, "SELECT fence_token FROM acct"); v != 1 || tok != 5 {
		t.Fatalf("a refused pool wrote: val %d token %d", v, tok)
	}
	if n := queryInt(t, db, "SELECT COUNT(*) FROM fence_tokens"); n != 0 {
		t.Fatalf("the probe or a refused write left %d fence rows", n)
	}

	found := newStore(openRaw(t, dsn, true, false), migrations.MySQL)
	for range 2 { // the second write stores the values the row already has
		if err := found.Update(t.Context(), g, row, fence.Col{Name: "val", Value: 2}); err != nil {
			t.Fatalf("Update() with clientFoundRows = %v", err)
		}
	}
}

// comStmtPrepare reads the server's count of prepared statements.
func comStmtPrepare(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRowContext(t.Context(), "SHOW GLOBAL STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMySQLOpen_noPreparePerCall: a pool from sqlfence/mysql sends each statement in one
// round trip (interpolateParams); the same writes through a plain DSN prepare a
// server-side statement per call, which is what halves throughput.
func TestMySQLOpen_noPreparePerCall(t *testing.T) {
	db, dsn := mysqlDB(t)
	mustExec(t, db, "CREATE TABLE acct (id VARCHAR(20) PRIMARY KEY, val BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, db, "INSERT INTO acct (id, val) VALUES ('a', 0)")
	const calls = 20
	next := fence.Token(100)
	writes := func(s *sqlfence.Store) int64 {
		before := comStmtPrepare(t, db)
		for i := range calls {
			next++
			g := fence.NewGrant("acct", next)
			if err := s.Update(t.Context(), g, fence.Row{Table: "acct", Key: []fence.Col{{Name: "id", Value: "a"}}}, fence.Col{Name: "val", Value: i}); err != nil {
				t.Fatal(err)
			}
			err := s.Fenced(t.Context(), g, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(t.Context(), "UPDATE acct SET val = val + ? WHERE id = ?", 1, "a")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return comStmtPrepare(t, db) - before
	}
	if n := writes(newStore(db, migrations.MySQL)); n != 0 {
		t.Fatalf("mysql.Open pool: %d server-side prepares for %d fenced writes, want 0", n, 2*calls)
	}
	if n := writes(newStore(openRaw(t, dsn, true, false), migrations.MySQL)); n < 2*calls {
		t.Fatalf("plain DSN: %d prepares for %d writes; expected one per statement (the test cannot tell otherwise)", n, 2*calls)
	}
}

// TestMySQL_Upsert_autoIncrement: on a table with an AUTO_INCREMENT column the
// insert id is not 0, so the Store must read the row back to tell a write from a
// refusal.
func TestMySQL_Upsert_autoIncrement(t *testing.T) {
	db, _ := mysqlDB(t)
	mustExec(t, db, "CREATE TABLE jobs (seq BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) NOT NULL UNIQUE, "+
		"state VARCHAR(20) NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	s := newStore(db, migrations.MySQL)
	row := fence.Row{Table: "jobs", Key: []fence.Col{fence.Col{Name: "name", Value: "nightly"}}}
	g := func(tok fence.Token) fence.Grant { return fence.NewGrant("jobs", tok) }
	steps := []struct {
		tok   fence.Token
		state string
		stale bool
		want  string
	}{
		{3, "queued", false, "queued"},   // insert: insert id 1
		{4, "running", false, "running"}, // update: insert id 1 again
		{4, "running", false, "running"}, // unchanged values
		{2, "stale", true, "running"},    // refused
	}
	for i, st := range steps {
		err := s.Upsert(t.Context(), g(st.tok), row, fence.Col{Name: "state", Value: st.state})
		if st.stale {
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Seen != 4 {
				t.Fatalf("step %d: Upsert(%d) = %v, want stale with Seen 4", i, st.tok, err)
			}
		} else if err != nil {
			t.Fatalf("step %d: Upsert(%d) = %v", i, st.tok, err)
		}
		if got := queryString(t, db, "SELECT state FROM jobs WHERE name = 'nightly'"); got != st.want {
			t.Fatalf("step %d: state = %q, want %q", i, got, st.want)
		}
	}
}

// TestMySQL_schemaQualified writes to database.table.
func TestMySQL_schemaQualified(t *testing.T) {
	db, dsn := mysqlDB(t)
	cfg, _ := gomysql.ParseDSN(dsn)
	mustExec(t, db, "CREATE TABLE acct (id VARCHAR(20) PRIMARY KEY, val BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, db, "INSERT INTO acct (id, val) VALUES ('a', 0)")
	s := newStore(db, migrations.MySQL)
	row := fence.Row{Table: cfg.DBName + ".acct", Key: []fence.Col{fence.Col{Name: "id", Value: "a"}}}
	if err := s.Update(t.Context(), fence.NewGrant("acct", 2), row, fence.Col{Name: "val", Value: 7}); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, db, "SELECT val FROM acct"); got != 7 {
		t.Fatalf("val = %d", got)
	}
}

// TestStore_Delete_keyPicksManyRows refuses, deleting nothing.
func TestStore_Delete_keyPicksManyRows(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		mustExec(t, db, "CREATE TABLE invoice_lines (invoice VARCHAR(20) NOT NULL, n INT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
		mustExec(t, db, "INSERT INTO invoice_lines (invoice, n) VALUES ('i1', 1), ('i1', 2)")
		err := s.Delete(t.Context(), fence.NewGrant("inv", 3), fence.Row{Table: "invoice_lines", Key: []fence.Col{{Name: "invoice", Value: "i1"}}})
		if !errors.Is(err, fence.ErrInvalidArgument) {
			t.Fatalf("Delete() = %v, want ErrInvalidArgument", err)
		}
		if n := queryInt(t, db, "SELECT COUNT(*) FROM invoice_lines"); n != 2 {
			t.Fatalf("%d rows left, want 2", n)
		}
		if n := queryInt(t, db, "SELECT COUNT(*) FROM fence_tokens"); n != 0 {
			t.Fatal("the refused delete kept its fence raise")
		}
	})
}

// TestStore_Fenced_panic rolls back and lets the panic go on.
func TestStore_Fenced_panic(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		mustExec(t, db, "CREATE TABLE p (id INT PRIMARY KEY)")
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the panic", r)
				}
			}()
			s.Fenced(t.Context(), fence.NewGrant("p", 1), func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(t.Context(), "INSERT INTO p VALUES (1)"); err != nil {
					t.Error(err)
				}
				panic("boom")
			})
		}()
		if n := queryInt(t, db, "SELECT COUNT(*) FROM p"); n != 0 {
			t.Fatal("a panicking fn's write committed")
		}
		// The connection went back clean: the next transaction works.
		if err := s.Fenced(t.Context(), fence.NewGrant("p", 2), func(*sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMigrations_upDownUp checks the Store against migrations applied, rolled back
// and applied again: Down forgets every token.
func TestMigrations_upDownUp(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db, _ := b.open(t)
			md := migrationsDialect(b.d)
			s := newStore(db, b.d)
			ok := func(*sql.Tx) error { return nil }
			if err := s.Fenced(t.Context(), fence.NewGrant("m", 9), ok); err != nil {
				t.Fatal(err)
			}
			if err := migrations.Down(context.Background(), db, md); err != nil {
				t.Fatal(err)
			}
			if err := s.Fenced(t.Context(), fence.NewGrant("m", 10), ok); err == nil {
				t.Fatal("Fenced() succeeded without fence_tokens")
			}
			if err := migrations.Up(context.Background(), db, md); err != nil {
				t.Fatal(err)
			}
			if err := s.Fenced(t.Context(), fence.NewGrant("m", 1), ok); err != nil {
				t.Fatalf("after Down and Up, token 1 = %v; want accepted", err)
			}
		})
	}
}
