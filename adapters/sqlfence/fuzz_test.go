package sqlfence_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/internal/tests/quotetest"
	"github.com/fencegate/fencegate/migrations"
)

var hostileNames = []string{
	"invoices", "app.invoices", `we"ird`, "tab`le", "`; DROP TABLE fence_tokens; -- ", `"; DROP TABLE fence_tokens; --`,
	"a.b.c", ".x", "x.", "it's", "/* c */", "x\x00y", "naïve", "\u202eevil", "?", "$1", strings.Repeat("n", 65), "\xff",
}

// FuzzQuoteTable checks, in every dialect, that a table or column name the
// builders accept is quoted into exactly the identifiers it names (backticks
// for MySQL, double quotes otherwise), so no name can end its quotes and add
// SQL; and that a refused one matches fence.ErrInvalidArgument as an invalid identifier.
func FuzzQuoteTable(f *testing.F) {
	for _, s := range hostileNames {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, d := range []migrations.Dialect{migrations.MySQL, migrations.SQLite, migrations.Postgres} {
			qc := byte('"')
			if d == migrations.MySQL {
				qc = '`'
			}
			q, err := sqlfence.QuoteTable(d, name)
			if err != nil {
				if !fencetest.Match(err, fencetest.Invalid("fence: invalid identifier: ")) {
					t.Fatalf("%s: QuoteTable(%q) = %v: not fence.ErrInvalidArgument for an invalid identifier", d, name, err)
				}
			} else if parts, ok := quotetest.Idents(q, qc); !ok || strings.Join(parts, ".") != name {
				t.Fatalf("%s: QuoteTable(%q) = %s: reads back as %q", d, name, q, parts)
			}
			c, err := sqlfence.QuoteColumn(d, name)
			if err != nil {
				if !fencetest.Match(err, fencetest.Invalid("fence: invalid identifier: ")) {
					t.Fatalf("%s: QuoteColumn(%q) = %v: not fence.ErrInvalidArgument for an invalid identifier", d, name, err)
				}
				continue
			}
			if parts, ok := quotetest.Idents(c, qc); !ok || len(parts) != 1 || parts[0] != name {
				t.Fatalf("%s: QuoteColumn(%q) = %s: reads back as %q", d, name, c, parts)
			}
		}
	})
}
