package scenario_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// The invoices the jobs write: one row per account, its value naming the worker and
// token that wrote it.
const (
	createInvoices = `CREATE TABLE IF NOT EXISTS scenario_invoices (account VARCHAR(200) PRIMARY KEY, written_by VARCHAR(200) NOT NULL)`
	upsertSQLite   = `INSERT INTO scenario_invoices (account, written_by) VALUES (?, ?) ON CONFLICT (account) DO UPDATE SET written_by = excluded.written_by`
)

func sqliteSetup(t *testing.T) string {
	path := t.TempDir() + "/invoices.db"
	sqlSetup(t, openSQLite(t, path), migrations.SQLite)
	return path
}

func sqliteOpen(ctx context.Context, path string, bare bool) (writeFunc, func(), error) {
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, nil, err
	}
	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return sqlWrite(db, store, upsertSQLite, bare), func() { db.Close() }, nil
}

func sqliteRead(ctx context.Context, path string) (map[string]string, error) {
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return readInvoices(ctx, db)
}

// invoiceJob takes the resource's lock and writes the worker's invoice with write.
func invoiceJob(ctx context.Context, w *scenario.Worker, resource string, write func(context.Context, fence.Grant, string) error) error {
	l, err := w.Acquire(ctx, resource)
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	value := fmt.Sprintf("%s@%d", w.Name(), l.Token())
	return w.Write(ctx, l, value, func(ctx context.Context) error { return write(ctx, l, value) })
}

func readInvoices(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT account, written_by FROM scenario_invoices`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	final := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		final[k] = v
	}
	return final, rows.Err()
}

func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// gcPause is the timeline of the problem statement: a takes the lock and freezes
// at its write; its lease expires, b takes the lock and writes; a wakes and writes.
func gcPause() []*scenario.Step {
	return []*scenario.Step{
		scenario.Start("a"),
		scenario.Freeze("a").When("a", scenario.AboutToWrite).Until("b", scenario.Finished),
		scenario.Start("b"),
	}
}

func TestRun_gcPause_sqlite(t *testing.T) {
	t.Parallel() // a run mostly waits out a lease
	h := scenario.Run(t, backends[0].config(false), gcPause()...)
	a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
	if b.Outcome != scenario.Acknowledged || a.Outcome == scenario.Acknowledged || a.Token >= b.Token {
		t.Fatalf("a's write %+v, b's %+v: want b's acknowledged and a's (lower token) refused", a, b)
	}
}

// TestRecord_gcPause_sqliteBare runs the same timeline with a write that presents no
// token: a's stale write lands over b's, and the verdict must say so.
func TestRecord_gcPause_sqliteBare(t *testing.T) {
	t.Parallel() // a run mostly waits out a lease
	h := scenario.Record(t, backends[0].config(true), gcPause()...)
	err := h.Check()
	var v *scenario.ViolationError
	if !errors.As(err, &v) || !errors.Is(err, scenario.ErrViolation) {
		t.Fatalf("Check() = %v; want a violation: a's stale write landed over b's", err)
	}
	a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
	for _, want := range []string{
		fmt.Sprintf(`resource "invoice-42": a's write at token %d ("a@%d") landed after b's write at token %d ("b@%d") was acknowledged`, a.Token, a.Token, b.Token, b.Token),
		fmt.Sprintf(`b's acknowledged write at token %d ("b@%d") is lost: the final value "a@%d" is a's write at the lower token %d`, b.Token, b.Token, a.Token, a.Token),
		"a: #", "frozen", "thawed", "b: #",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the verdict does not say %q:\n%v", want, err)
		}
	}
	t.Logf("the verdict on a bare write:\n%v", err)
}

// writeOf returns worker's one recorded write.
func writeOf(t *testing.T, h *scenario.History, worker string) scenario.WriteRecord {
	t.Helper()
	for _, w := range h.Writes {
		if w.Worker == worker {
			return w
		}
	}
	t.Fatalf("no write of worker %s in the history:\n%s", worker, h.Timelines())
	return scenario.WriteRecord{}
}
