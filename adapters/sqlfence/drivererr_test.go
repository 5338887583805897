package sqlfence

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"
)

// TestDriverErrors checks that the drivers' errors are read without importing the
// drivers, through wrapping and joining as errors.As would find them.
func TestDriverErrors(t *testing.T) {
	me := &gomysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}, Message: "Deadlock found"}
	wrapped := fmt.Errorf("outer: %w", errors.Join(errors.New("other"), fmt.Errorf("inner: %w", me)))
	got, ok := asMySQL(wrapped)
	if !ok || got != (mysqlError{Number: 1213, SQLState: "40001", Message: "Deadlock found"}) {
		t.Fatalf("asMySQL = %+v, %v", got, ok)
	}
	if !(mysql{}).busy(wrapped) {
		t.Fatal("busy(MySQL 1213) = false")
	}
	var nilMe *gomysql.MySQLError
	for _, err := range []error{nil, errors.New("Error 1213: look-alike"), nilMe} {
		if _, ok := asMySQL(err); ok {
			t.Fatalf("asMySQL(%#v) found a MySQL error", err)
		}
	}

	db, err := sql.Open("sqlite", "file:drivererr?mode=memory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec("SELECT * FROM fence_tokens")
	if !(sqlite{}).missingTable(fmt.Errorf("wrapped: %w", err), "fence_tokens") {
		t.Fatalf("missingTable(%v) = false", err)
	}
	if _, err := db.Exec("CREATE TABLE u (k TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO u VALUES ('a')"); err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec("INSERT INTO u VALUES ('a')")
	if code, _, ok := sqliteError(err); !ok || code != 1555 {
		t.Fatalf("sqliteError(%v) = %d, %v; want SQLITE_CONSTRAINT_PRIMARYKEY", err, code, ok)
	}
	if d := (sqlite{}).duplicate(err, "u"); d == nil || d.Constraint != "u.k" {
		t.Fatalf("duplicate(%v) = %+v", err, d)
	}
	if _, _, ok := sqliteError(wrapped); ok {
		t.Fatal("sqliteError found SQLite in a MySQL error")
	}
}
