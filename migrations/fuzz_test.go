package migrations_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/quotetest"
	"github.com/fencegate/fencegate/migrations"
)

// FuzzGenerateTokenColumn checks, in every dialect, that a generated migration
// is a one-line comment and one ALTER TABLE whose quoted table reads back as
// exactly the name given, so no table name can add SQL (or end the comment and
// add SQL there: the databases end a -- comment only at \n or \r); and that a refused name matches fence.ErrInvalidArgument as an invalid identifier.
func FuzzGenerateTokenColumn(f *testing.F) {
	for _, s := range []string{"invoices", "app.invoices", `we"ird`, "tab`le", `x"; DROP TABLE fence_tokens; --`,
		"x`; DROP TABLE fence_tokens; -- ", "a.b.c", "line\nbreak", "cr\rx", "x\x00y", "naïve", "\u2028sep", "\u0085nel", "../../etc", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, table string) {
		for _, d := range []migrations.Dialect{migrations.Postgres, migrations.MySQL, migrations.SQLite} {
			dir := t.TempDir()
			g, err := migrations.GenerateTokenColumn(dir, table, d)
			if err != nil {
				if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "invalid identifier") {
					t.Fatalf("%v: GenerateTokenColumn(%q) = %v: not fence.ErrInvalidArgument for an invalid identifier", d, table, err)
				}
				continue
			}
			q := byte('"')
			end := ";"
			if d == migrations.MySQL {
				q, end = '`', ""
			}
			for file, tail := range map[string]string{
				g.Up:   " ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0" + end + "\n",
				g.Down: " DROP COLUMN fence_token" + end + "\n",
			} {
				if !strings.HasPrefix(file, dir+string(os.PathSeparator)) || strings.ContainsAny(file[len(dir)+1:], `/\`) {
					t.Fatalf("%v: GenerateTokenColumn(%q) wrote %s outside %s", d, table, file, dir)
				}
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				head, stmt, ok := strings.Cut(string(b), "\n")
				if !ok || !strings.HasPrefix(head, "-- ") || strings.ContainsRune(head, '\r') {
					t.Fatalf("%v: GenerateTokenColumn(%q): first line %q is not one comment line", d, table, head)
				}
				rest, ok := strings.CutPrefix(stmt, "ALTER TABLE ")
				if !ok || !strings.HasSuffix(rest, tail) {
					t.Fatalf("%v: GenerateTokenColumn(%q): statement %q", d, table, stmt)
				}
				parts, ok := quotetest.Idents(strings.TrimSuffix(rest, tail), q)
				if !ok || strings.Join(parts, ".") != table {
					t.Fatalf("%v: GenerateTokenColumn(%q): table reads back as %q in %q", d, table, parts, stmt)
				}
			}
		}
	})
}
