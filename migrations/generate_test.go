package migrations_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

func TestGenerateTokenColumn_versions(t *testing.T) {
	tests := []struct {
		name     string
		existing []string
		table    string
		want     uint64
		wantUp   string
	}{
		{"empty folder", nil, "invoices", 1, "1_add_fence_token_to_invoices.up.sql"},
		{"sequential", []string{"1_a.up.sql", "1_a.down.sql", "2_b.up.sql", "README.md"}, "invoices", 3, "3_add_fence_token_to_invoices.up.sql"},
		{"timestamps", []string{"20250101120000_a.up.sql", "20240101120000_b.up.sql"}, "invoices", 20250101120001, "20250101120001_add_fence_token_to_invoices.up.sql"},
		{"schema-qualified", nil, "billing.Invoices", 1, "1_add_fence_token_to_billing_invoices.up.sql"},
		{"zero-padded", []string{"000001_billing.up.sql", "000001_billing.down.sql"}, "invoices", 2, "000002_add_fence_token_to_invoices.up.sql"},
		{"zero-padded, the highest's width", []string{"1_a.up.sql", "0009_b.up.sql"}, "invoices", 10, "0010_add_fence_token_to_invoices.up.sql"},
		{"zero-padded past its width", []string{"99_a.up.sql"}, "invoices", 100, "100_add_fence_token_to_invoices.up.sql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.existing {
				writeFile(t, filepath.Join(dir, f), "-- app\n")
			}
			g, err := migrations.GenerateTokenColumn(dir, tt.table, migrations.Postgres)
			if err != nil {
				t.Fatalf("GenerateTokenColumn() = %v", err)
			}
			if g.Version != tt.want || filepath.Base(g.Up) != tt.wantUp || g.Down != strings.TrimSuffix(g.Up, ".up.sql")+".down.sql" {
				t.Fatalf("Generated = %+v, want version %d and %s", g, tt.want, tt.wantUp)
			}
			for _, f := range tt.existing {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != "-- app\n" {
					t.Fatalf("existing %s changed: %q, %v", f, b, err)
				}
			}
		})
	}
}

func TestGenerateTokenColumn_sql(t *testing.T) {
	tests := []struct {
		d        migrations.Dialect
		table    string
		up, down string
	}{
		{migrations.Postgres, `billing.inv"oices`, `ALTER TABLE "billing"."inv""oices" ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0;`, `ALTER TABLE "billing"."inv""oices" DROP COLUMN fence_token;`},
		{migrations.MySQL, "inv`oices", "ALTER TABLE `inv``oices` ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0\n", "ALTER TABLE `inv``oices` DROP COLUMN fence_token\n"},
		{migrations.SQLite, "invoices; DROP TABLE x", `ALTER TABLE "invoices; DROP TABLE x" ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0;`, `ALTER TABLE "invoices; DROP TABLE x" DROP COLUMN fence_token;`},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			g, err := migrations.GenerateTokenColumn(t.TempDir(), tt.table, tt.d)
			if err != nil {
				t.Fatal(err)
			}
			up, _ := os.ReadFile(g.Up)
			down, _ := os.ReadFile(g.Down)
			if !strings.Contains(string(up), tt.up) || !strings.Contains(string(down), tt.down) {
				t.Fatalf("up:\n%s\ndown:\n%s\nwant %q and %q", up, down, tt.up, tt.down)
			}
		})
	}
}

func TestGenerateTokenColumn_badInput(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		dir   string
		table string
		d     migrations.Dialect
		msg   string // what the error, wrapping fence.ErrInvalidArgument, must say
	}{
		{"empty table", dir, "", migrations.Postgres, "invalid identifier: empty table name"},
		{"leading dot", dir, ".invoices", migrations.Postgres, "invalid identifier: empty schema name"},
		{"two dots", dir, "a.b.c", migrations.Postgres, `table name "a.b.c" has more than one dot`},
		{"nul", dir, "inv\x00oices", migrations.Postgres, "contains a NUL byte"},
		{"not utf-8", dir, "inv\xffoices", migrations.MySQL, "is not UTF-8"},
		{"too long for postgres", dir, strings.Repeat("a", 64), migrations.Postgres, "is longer than postgres's 63 bytes"},
		{"too long for mysql", dir, strings.Repeat("a", 65), migrations.MySQL, "is longer than mysql's 64 characters"},
		{"too long for sqlite", dir, strings.Repeat("a", 129), migrations.SQLite, "is longer than sqlite's 128 characters"},
		{"unknown dialect", dir, "invoices", migrations.Dialect(0), "migrations: unknown dialect 0"},
		{"empty folder name", "", "invoices", migrations.Postgres, "empty migrations folder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := migrations.GenerateTokenColumn(tt.dir, tt.table, tt.d); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error = %v, want fence.ErrInvalidArgument saying %q", err, tt.msg)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("refused calls wrote %d files", len(entries))
	}
}

// TestGenerateTokenColumn_neverOverwrites runs the generator twice for one table, and
// eight times at once for another: one pair is written per table, the rest refused.
func TestGenerateTokenColumn_neverOverwrites(t *testing.T) {
	dir := t.TempDir()
	first, err := migrations.GenerateTokenColumn(dir, "invoices", migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, first.Up, "-- edited by hand\n")
	if _, err := migrations.GenerateTokenColumn(dir, "invoices", migrations.Postgres); !errors.Is(err, migrations.ErrExists) {
		t.Fatalf("second call = %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(first.Up); string(b) != "-- edited by hand\n" {
		t.Fatalf("the up file was overwritten: %q", b)
	}

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = migrations.GenerateTokenColumn(dir, "orders", migrations.Postgres) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, migrations.ErrExists):
			t.Fatalf("concurrent call = %v, want nil or ErrExists", err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*_add_fence_token_to_orders.*.sql"))
	if ok != 1 || len(matches) != 2 {
		t.Fatalf("%d concurrent calls succeeded and left %v; want exactly one pair", ok, matches)
	}
}

// TestGenerateTokenColumn_applied runs the generated pair with golang-migrate on a
// real table holding rows: up adds the column with token 0 on every row, down drops it.
func TestGenerateTokenColumn_applied(t *testing.T) {
	for _, dd := range dialects {
		t.Run(dd.d.String(), func(t *testing.T) {
			ctx := t.Context()
			db, again := dd.open(t)
			const table = `Odd "Invoices"`
			quoted := `"Odd ""Invoices"""`
			if dd.d == migrations.MySQL {
				quoted = "`Odd \"Invoices\"`"
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+quoted+" (account BIGINT PRIMARY KEY, total BIGINT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO "+quoted+" VALUES (1, 10), (2, 20)"); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if _, err := migrations.GenerateTokenColumn(dir, table, dd.d); err != nil {
				t.Fatal(err)
			}
			m := appMigrate(t, dd, again(t), dir)
			if err := m.Up(); err != nil {
				t.Fatalf("golang-migrate up: %v", err)
			}
			var sum, n int64
			if err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(fence_token), -1), COUNT(*) FROM "+quoted).Scan(&sum, &n); err != nil || sum != 0 || n != 2 {
				t.Fatalf("after up: sum(fence_token) = %d over %d rows (%v), want 0 over 2", sum, n, err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO "+quoted+" (account, total) VALUES (3, 30)"); err != nil {
				t.Fatalf("insert without a token after up: %v", err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO "+quoted+" (account, total, fence_token) VALUES (4, 40, NULL)"); err == nil {
				t.Fatal("fence_token accepted NULL")
			}
			if err := m.Down(); err != nil {
				t.Fatalf("golang-migrate down: %v", err)
			}
			if _, err := db.ExecContext(ctx, "SELECT fence_token FROM "+quoted); err == nil {
				t.Fatal("fence_token still there after down")
			}
		})
	}
}
