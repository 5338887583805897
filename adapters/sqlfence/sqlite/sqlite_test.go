package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
)

func TestOpen_badPath(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db?mode=ro", "a\x00b.db"} {
		db, err := sqlite.Open(path)
		if !errors.Is(err, fence.ErrInvalidArgument) || db != nil {
			t.Fatalf("Open(%q) = %v, %v; want ErrInvalidArgument and no pool", path, db, err)
		}
	}
}

// TestOpen_oddPath opens a file whose name holds URI metacharacters, with the
// settings concurrent writers need.
func TestOpen_oddPath(t *testing.T) {
	path := t.TempDir() + "/a?b#c%d e.db"
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE t (id INTEGER)"); err != nil {
		t.Fatal(err)
	}
	for pragma, want := range map[string]string{"journal_mode": "wal", "busy_timeout": "5000", "synchronous": "1"} {
		var got string
		if err := db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil || got != want {
			t.Fatalf("PRAGMA %s = %q, %v; want %q", pragma, got, err, want)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at the path given: %v", err)
	}
}

// TestOpen_immediate checks BEGIN IMMEDIATE: a second writer's begin waits for (and,
// past the busy timeout, is refused by) the first's write lock, taken at begin.
func TestOpen_immediate(t *testing.T) {
	db, err := sqlite.Open(t.TempDir() + "/x.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var mode string
	if err := tx.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "PRAGMA busy_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.BeginTx(t.Context(), &sql.TxOptions{}); err == nil {
		t.Fatal("a second begin got the write lock while the first transaction held it")
	}
}
