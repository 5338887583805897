package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// The GC-pause timeline on SQLite: the holder with token 33 freezes, its lock passes
// to token 34, and when 33 wakes its write is refused by the database.
func ExampleStore_Fenced() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlfence-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	db.ExecContext(ctx, `CREATE TABLE invoices (account INTEGER PRIMARY KEY, total INTEGER NOT NULL)`)
	db.ExecContext(ctx, `INSERT INTO invoices VALUES (42, 0)`)

	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		panic(err)
	}
	bill := func(token fence.Token, total int) error {
		// In a service the grant is the *lockclient.Lock itself.
		return fence.Exec(ctx, store, fence.NewGrant("account-42", token), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE invoices SET total = ? WHERE account = ?`, total, 42)
			return err
		})
	}
	fmt.Println("token 34:", bill(34, 200))
	err = bill(33, 100) // woke up from its pause
	fmt.Println("token 33 stale:", errors.Is(err, fence.ErrStale))
	fmt.Println(err)

	var total int
	db.QueryRowContext(ctx, `SELECT total FROM invoices WHERE account = 42`).Scan(&total)
	fmt.Println("total:", total)
	// Output:
	// token 34: <nil>
	// token 33 stale: true
	// fence: stale token 33 for "account-42": 34 already seen
	// total: 200
}

// A token-column write: one conditional statement, no transaction.
func ExampleStore_Update() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlfence-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil { // fence_tokens: Update raises the resource's mark
		panic(err)
	}
	db.ExecContext(ctx, `CREATE TABLE jobs (name TEXT PRIMARY KEY, state TEXT NOT NULL, fence_token INTEGER NOT NULL DEFAULT 0)`)
	db.ExecContext(ctx, `INSERT INTO jobs (name, state) VALUES ('nightly', 'queued')`)

	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		panic(err)
	}
	job := fence.Row{Table: "jobs", Key: []fence.Col{fence.Col{Name: "name", Value: "nightly"}}}
	fmt.Println(store.Update(ctx, fence.NewGrant("nightly", 8), job, fence.Col{Name: "state", Value: "done"}))
	fmt.Println(store.Update(ctx, fence.NewGrant("nightly", 7), job, fence.Col{Name: "state", Value: "running"}))
	fmt.Println(store.Update(ctx, fence.NewGrant("nightly", 9), fence.Row{Table: "jobs", Key: []fence.Col{fence.Col{Name: "name", Value: "weekly"}}}, fence.Col{Name: "state", Value: "done"}))
	// Output:
	// <nil>
	// fence: stale token 7 for "nightly": 8 already seen
	// fence: row not found: no row in "jobs" where "name" = ?
}
