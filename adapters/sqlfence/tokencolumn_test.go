package sqlfence_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// TestStore_noTokenColumn: a single-row write on a table without the token column
// names the migration generator on every database, the driver's error still wrapped.
func TestStore_noTokenColumn(t *testing.T) {
	for _, db := range []struct {
		name string
		open func(testing.TB) (*sql.DB, string)
		d    migrations.Dialect
	}{
		{"postgres", postgresDB, migrations.Postgres},
		{"mysql", mysqlDB, migrations.MySQL},
		{"sqlite", sqliteDB, migrations.SQLite},
	} {
		t.Run(db.name, func(t *testing.T) {
			ctx := t.Context()
			conn, _ := db.open(t)
			mustExec(t, conn, "CREATE TABLE plain (id int PRIMARY KEY, amount int NOT NULL)")
			mustExec(t, conn, "INSERT INTO plain VALUES (1, 10)")
			s := newStore(conn, db.d)
			row := fence.Row{Table: "plain", Key: []fence.Col{{Name: "id", Value: 1}}}
			custom := row
			custom.TokenColumn = "tok"
			g := fence.NewGrant("plain-1", 5)
			writes := []struct {
				name   string
				write  func() error
				column string
			}{
				{"update", func() error { return s.Update(ctx, g, row, fence.Col{Name: "amount", Value: 11}) }, "fence_token"},
				{"upsert", func() error { return s.Upsert(ctx, g, row, fence.Col{Name: "amount", Value: 12}) }, "fence_token"},
				{"delete", func() error { return s.Delete(ctx, g, row) }, "fence_token"},
				{"update, own token column", func() error { return s.Update(ctx, g, custom, fence.Col{Name: "amount", Value: 13}) }, "tok"},
			}
			for _, w := range writes {
				t.Run(w.name, func(t *testing.T) {
					err := w.write()
					if !errors.Is(err, fence.ErrSchema) {
						t.Fatalf("err = %v, want fence.ErrSchema", err)
					}
					if n := strings.Count(err.Error(), "sqlfence:"); n != 1 {
						t.Errorf("err = %v, says sqlfence: %d times", err, n)
					}
					for _, want := range []string{"fencegate-migrate gen", "-dialect " + db.d.String(), "GenerateTokenColumn", `"` + w.column + `"`} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("err = %v, does not name %s", err, want)
						}
					}
				})
			}
			if got := queryInt(t, conn, "SELECT amount FROM plain WHERE id = 1"); got != 10 {
				t.Errorf("amount = %d after the refused writes, want 10", got)
			}
		})
	}
}
