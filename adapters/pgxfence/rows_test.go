package pgxfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/nolock"
)

// TestStore_rows_schemaQualifiedCompositeKey writes a schema-qualified table with a
// two-column key and its own token column name.
func TestStore_rows_schemaQualifiedCompositeKey(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, `CREATE SCHEMA "Billing"`)
	mustExec(t, pool, `CREATE TABLE "Billing"."Line Items" (invoice BIGINT, line INT, amount BIGINT NOT NULL DEFAULT 0,
		"Tok" BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (invoice, line))`)
	s := newStore(pool)
	ctx := t.Context()
	r := fence.Row{Table: "Billing.Line Items", Key: []fence.Col{{Name: "invoice", Value: 7}, {Name: "line", Value: 1}}, TokenColumn: "Tok"}
	g := func(tok fence.Token) fence.Grant { return fence.NewGrant("invoice-7", tok) }
	if err := s.Upsert(ctx, g(5), r, fence.Col{Name: "amount", Value: 500}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if err := s.Update(ctx, g(6), r, fence.Col{Name: "amount", Value: 600}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	wantStale(t, s.Update(ctx, g(5), r, fence.Col{Name: "amount", Value: 1}), 5, 6)
	other := r
	other.Key = []fence.Col{{Name: "invoice", Value: 7}, {Name: "line", Value: 2}}
	if err := s.Update(ctx, g(6), other, fence.Col{Name: "amount", Value: 1}); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Update of line 2 = %v, want ErrNotFound", err)
	}
	if got := mustInt(t, pool, `SELECT amount FROM "Billing"."Line Items" WHERE invoice = 7 AND line = 1`); got != 600 {
		t.Fatalf("amount = %d, want 600", got)
	}
	if err := s.Delete(ctx, g(8), r); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantStale(t, s.Upsert(ctx, g(7), r, fence.Col{Name: "amount", Value: 700}), 7, 8)
	if got := mustInt(t, pool, `SELECT count(*) FROM "Billing"."Line Items"`); got != 0 {
		t.Fatalf("%d rows after a stale re-insert, want 0", got)
	}
}

// TestStore_rows_refusalLeavesFenceRow checks that a refused Update, Upsert or Delete,
// and a Delete of a missing row, leave the fence row as it was.
func TestStore_rows_refusalLeavesFenceRow(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0, fence_token BIGINT NOT NULL DEFAULT 0)")
	s := newStore(pool)
	ctx := t.Context()
	row := fence.Row{Table: "accounts", Key: []fence.Col{{Name: "id", Value: "a"}}}
	// The row alone holds token 50 (written before the resource had a fence row).
	mustExec(t, pool, "INSERT INTO accounts (id, balance, fence_token) VALUES ('a', 5, 50)")
	wantStale(t, s.Update(ctx, fence.NewGrant("acct-a", 40), row, fence.Col{Name: "balance", Value: 4}), 40, 50)
	wantStale(t, s.Upsert(ctx, fence.NewGrant("acct-a", 40), row, fence.Col{Name: "balance", Value: 4}), 40, 50)
	wantStale(t, s.Delete(ctx, fence.NewGrant("acct-a", 40), row), 40, 50)
	if got := stored(t, pool, "acct-a"); got != 0 {
		t.Fatalf("refused writes raised the fence row to %d", got)
	}
	missing := fence.Row{Table: "accounts", Key: []fence.Col{{Name: "id", Value: "nobody"}}}
	if err := s.Delete(ctx, fence.NewGrant("acct-nobody", 9), missing); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Delete of a missing row = %v, want ErrNotFound", err)
	}
	if got := stored(t, pool, "acct-nobody"); got != 0 {
		t.Fatalf("Delete of a missing row raised the fence row to %d", got)
	}
	// A fenced transaction with a higher token fences the token-column writes too.
	if err := s.Fenced(ctx, fence.NewGrant("acct-a", 60), func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	wantStale(t, s.Upsert(ctx, fence.NewGrant("acct-a", 55), row, fence.Col{Name: "balance", Value: 55}), 55, 60)
	if got := mustInt(t, pool, "SELECT balance FROM accounts WHERE id = 'a'"); got != 5 {
		t.Fatalf("balance = %d, want 5", got)
	}
}

func TestStore_rows_duplicate(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE users (id INT PRIMARY KEY, name TEXT NOT NULL CONSTRAINT users_name_key UNIQUE, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, pool, "INSERT INTO users (id, name) VALUES (1, 'neo'), (2, 'trinity')")
	s := newStore(pool)
	err := s.Update(t.Context(), fence.NewGrant("users", 3), fence.Row{Table: "users", Key: []fence.Col{fence.Col{Name: "id", Value: 2}}}, fence.Col{Name: "name", Value: "neo"})
	var de *nolock.DuplicateError
	if !errors.Is(err, nolock.ErrDuplicate) || !errors.As(err, &de) || de.Constraint != "users_name_key" || de.Table != "users" {
		t.Fatalf("Update to a taken name = %v (%+v), want a DuplicateError naming users_name_key", err, de)
	}
	if got := mustInt(t, pool, "SELECT fence_token FROM users WHERE id = 2"); got != 0 {
		t.Fatalf("refused update stored token %d", got)
	}
}

func TestStore_rows_badInput(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE t (id INT PRIMARY KEY, k INT, val INT, fence_token BIGINT NOT NULL DEFAULT 0)")
	s := newStore(pool)
	ctx := t.Context()
	g := fence.NewGrant("r", 1)
	key := []fence.Col{{Name: "id", Value: 1}}
	long := strings.Repeat("c", 64)
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"table too long", func() error {
			return s.Update(ctx, g, fence.Row{Table: long, Key: key}, fence.Col{Name: "val", Value: 1})
		}, fencetest.Invalid("is longer than postgres's 63 bytes")},
		{"schema too long", func() error {
			return s.Update(ctx, g, fence.Row{Table: long + ".t", Key: key}, fence.Col{Name: "val", Value: 1})
		}, fencetest.Invalid("schema name \"cccccccccccccccccccc")},
		{"three parts", func() error {
			return s.Update(ctx, g, fence.Row{Table: "a.b.t", Key: key}, fence.Col{Name: "val", Value: 1})
		}, fencetest.Invalid(`table name "a.b.t" has more than one dot`)},
		{"empty schema", func() error {
			return s.Update(ctx, g, fence.Row{Table: ".t", Key: key}, fence.Col{Name: "val", Value: 1})
		}, fencetest.Invalid("invalid identifier: empty schema name")},
		{"column too long", func() error {
			return s.Update(ctx, g, fence.Row{Table: "t", Key: key}, fence.Col{Name: long, Value: 1})
		}, fencetest.Invalid("column name \"cccccccccccccccccccc")},
		{"column not utf-8", func() error {
			return s.Update(ctx, g, fence.Row{Table: "t", Key: key}, fence.Col{Name: "v\xff", Value: 1})
		}, fencetest.Invalid("is not UTF-8")},
		{"token column with nul", func() error {
			return s.Update(ctx, g, fence.Row{Table: "t", Key: key, TokenColumn: "a\x00"}, fence.Col{Name: "val", Value: 1})
		}, fencetest.Invalid("token column name \"a\\x00\" contains a NUL byte")},
		{"set column twice", func() error {
			return s.Update(ctx, g, fence.Row{Table: "t", Key: key}, fence.Col{Name: "val", Value: 1}, fence.Col{Name: "val", Value: 2})
		}, fence.ErrInvalidArgument},
		{"set the key", func() error {
			return s.Upsert(ctx, g, fence.Row{Table: "t", Key: key}, fence.Col{Name: "id", Value: 2})
		}, fence.ErrInvalidArgument},
		{"set the token", func() error {
			return s.Update(ctx, g, fence.Row{Table: "t", Key: key}, fence.Col{Name: "fence_token", Value: 99})
		}, fence.ErrInvalidArgument},
		{"overlong resource", func() error {
			return s.Delete(ctx, fence.NewGrant(strings.Repeat("r", 200+1), 1), fence.Row{Table: "t", Key: key})
		}, fencetest.Invalid("resource name is 201 bytes, the limit is 200")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !fencetest.Match(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
		})
	}
	// Upsert on columns that are not a unique key says so.
	err := s.Upsert(ctx, g, fence.Row{Table: "t", Key: []fence.Col{{Name: "k", Value: 1}}}, fence.Col{Name: "val", Value: 1})
	if err == nil || !strings.Contains(err.Error(), "primary key or unique index") {
		t.Fatalf("Upsert on a non-unique key = %v", err)
	}
	if got := stored(t, pool, "r"); got != 0 {
		t.Fatalf("refused input raised the fence row to %d", got)
	}
}

// TestStore_rows_callerTx runs the token-column writes inside a caller's transaction:
// they commit and roll back with it.
func TestStore_rows_callerTx(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE t (id INT PRIMARY KEY, val INT, fence_token BIGINT NOT NULL DEFAULT 0)")
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(tx)
	row := fence.Row{Table: "t", Key: []fence.Col{fence.Col{Name: "id", Value: 1}}}
	if err := s.Upsert(ctx, fence.NewGrant("r", 3), row, fence.Col{Name: "val", Value: 3}); err != nil {
		t.Fatal(err)
	}
	wantStale(t, s.Upsert(ctx, fence.NewGrant("r", 2), row, fence.Col{Name: "val", Value: 2}), 2, 3)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustInt(t, pool, "SELECT count(*) FROM t"); got != 0 {
		t.Fatal("a rolled back caller's transaction kept the upsert")
	}
	if got := stored(t, pool, "r"); got != 0 {
		t.Fatalf("a rolled back caller's transaction kept fence token %d", got)
	}
}

// TestStore_Delete_keyPicksSeveralRows refuses a delete whose key is not unique.
func TestStore_Delete_keyPicksSeveralRows(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE events (kind TEXT NOT NULL, n INT, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, pool, "INSERT INTO events (kind, n) VALUES ('paid', 1), ('paid', 2)")
	s := newStore(pool)
	err := s.Delete(t.Context(), fence.NewGrant("events", 3), fence.Row{Table: "events", Key: []fence.Col{fence.Col{Name: "kind", Value: "paid"}}})
	if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "2 rows") {
		t.Fatalf("Delete() = %v, want ErrInvalidArgument naming 2 rows", err)
	}
	if got := mustInt(t, pool, "SELECT count(*) FROM events"); got != 2 {
		t.Fatalf("%d rows left, want 2", got)
	}
	if got := stored(t, pool, "events"); got != 0 {
		t.Fatalf("refused delete raised the fence row to %d", got)
	}
}

// TestStore_rows_tableNamedLikeTheStatementsOwn writes tables whose names match the
// names the statements use for their own parts.
func TestStore_rows_tableNamedLikeTheStatementsOwn(t *testing.T) {
	pool := newPool(t)
	s := newStore(pool)
	for i, tbl := range []string{"f", "t", "ft", "fencegate_raised", "fencegate_target"} {
		mustExec(t, pool, `CREATE TABLE "`+tbl+`" (id INT PRIMARY KEY, val INT, fence_token BIGINT NOT NULL DEFAULT 0)`)
		res := "res-" + tbl
		row := fence.Row{Table: tbl, Key: []fence.Col{{Name: "id", Value: i}}}
		if err := s.Upsert(t.Context(), fence.NewGrant(res, 5), row, fence.Col{Name: "val", Value: 5}); err != nil {
			t.Fatalf("%s: Upsert: %v", tbl, err)
		}
		if err := s.Delete(t.Context(), fence.NewGrant(res, 6), row); err != nil {
			t.Fatalf("%s: Delete: %v", tbl, err)
		}
		wantStale(t, s.Upsert(t.Context(), fence.NewGrant(res, 5), row, fence.Col{Name: "val", Value: 5}), 5, 6)
		if got := mustInt(t, pool, `SELECT count(*) FROM "`+tbl+`"`); got != 0 {
			t.Fatalf("%s: %d rows after a stale re-insert", tbl, got)
		}
	}
}

// TestStore_noTokenColumn: a single-row write on a table without the token column
// names the migration generator, and is still PostgreSQL's 42703 underneath.
func TestStore_noTokenColumn(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE plain (id int PRIMARY KEY, amount int NOT NULL, other_token bigint NOT NULL DEFAULT 0)")
	mustExec(t, pool, "INSERT INTO plain VALUES (1, 10, 0)")
	s := newStore(pool)
	row := fence.Row{Table: "plain", Key: []fence.Col{{Name: "id", Value: 1}}}
	custom := row
	custom.TokenColumn = "tok"
	g := fence.NewGrant("plain-1", 5)
	tests := []struct {
		name   string
		write  func() error
		column string
	}{
		{"update", func() error { return s.Update(ctx, g, row, fence.Col{Name: "amount", Value: 11}) }, "fence_token"},
		{"upsert", func() error { return s.Upsert(ctx, g, row, fence.Col{Name: "amount", Value: 12}) }, "fence_token"},
		{"delete", func() error { return s.Delete(ctx, g, row) }, "fence_token"},
		{"update, own token column", func() error { return s.Update(ctx, g, custom, fence.Col{Name: "amount", Value: 13}) }, "tok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.write()
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42703" || !errors.Is(err, fence.ErrSchema) {
				t.Fatalf("err = %v, want fence.ErrSchema wrapping PostgreSQL's 42703", err)
			}
			if n := strings.Count(err.Error(), "pgxfence:"); n != 1 {
				t.Errorf("err = %v, says pgxfence: %d times", err, n)
			}
			for _, s := range []string{"fencegate-migrate gen", "GenerateTokenColumn", `"` + tt.column + `"`} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %v, does not name %s", err, s)
				}
			}
		})
	}
	if got := mustInt(t, pool, "SELECT amount FROM plain WHERE id = 1"); got != 10 {
		t.Errorf("amount = %d after the refused writes, want 10", got)
	}
}
