package sqlfence_test

import (
	"database/sql"
	"errors"
	"os"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// TestGeneratedTokenColumn_fencedWrites applies the migrations package's generated
// token-column migration to an application table that already has rows, then makes
// fenced writes on it: existing rows (token 0) take any token, and stale ones are
// refused.
func TestGeneratedTokenColumn_fencedWrites(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		mustExec(t, db, "CREATE TABLE invoices (account BIGINT PRIMARY KEY, total BIGINT NOT NULL)")
		mustExec(t, db, "INSERT INTO invoices VALUES (1, 10), (2, 20)")
		gen, err := migrations.GenerateTokenColumn(t.TempDir(), "invoices", migrationsDialect(s.Dialect()))
		if err != nil {
			t.Fatal(err)
		}
		up, err := os.ReadFile(gen.Up)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, string(up))

		row := func(acct int) fence.Row {
			return fence.Row{Table: "invoices", Key: []fence.Col{{Name: "account", Value: acct}}}
		}
		g := func(tok fence.Token) fence.Grant { return fence.NewGrant("invoices", tok) }
		ctx := t.Context()
		if err := s.Update(ctx, g(33), row(1), fence.Col{Name: "total", Value: 100}); err != nil {
			t.Fatalf("Update(33) on a migrated row: %v", err)
		}
		if err := s.Update(ctx, g(34), row(1), fence.Col{Name: "total", Value: 200}); err != nil {
			t.Fatalf("Update(34): %v", err)
		}
		var se *fence.StaleError
		if err := s.Update(ctx, g(33), row(1), fence.Col{Name: "total", Value: 999}); !errors.As(err, &se) || se.Seen != 34 {
			t.Fatalf("stale Update(33) = %v, want StaleError seen 34", err)
		}
		if err := s.Upsert(ctx, g(35), row(3), fence.Col{Name: "total", Value: 30}); err != nil {
			t.Fatalf("Upsert(35) of a new row: %v", err)
		}
		if err := s.Delete(ctx, g(36), row(2)); err != nil {
			t.Fatalf("Delete(36): %v", err)
		}
		if err := s.Upsert(ctx, g(35), row(2), fence.Col{Name: "total", Value: 666}); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale re-insert after Delete(36) = %v, want ErrStale", err)
		}
		if got := queryInt(t, db, "SELECT SUM(total) FROM invoices"); got != 230 {
			t.Fatalf("sum(total) = %d, want 200 + 30", got)
		}
	})
}
