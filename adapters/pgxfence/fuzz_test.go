package pgxfence_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/internal/tests/quotetest"
)

var hostileNames = []string{
	"invoices", "public.invoices", `we"ird`, `"; DROP TABLE fence_tokens; --`, "a.b.c", ".x", "x.",
	"tab`le", "it's", "/* c */", "x\x00y", "naïve", "\u202eevil", "$1", "?", strings.Repeat("n", 64), "\xff",
}

// FuzzQuoteTable checks that a table name the builders accept is quoted into
// exactly the identifiers it names (pgx.Identifier's quoting), so no name can
// end its quotes and add SQL; and that a refused one matches
// fence.ErrInvalidArgument as an invalid identifier.
func FuzzQuoteTable(f *testing.F) {
	for _, s := range hostileNames {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		q, err := pgxfence.QuoteTable(name)
		if err != nil {
			if !fencetest.Match(err, fencetest.Invalid("fence: invalid identifier: ")) {
				t.Fatalf("QuoteTable(%q) = %v: not fence.ErrInvalidArgument for an invalid identifier", name, err)
			}
			return
		}
		parts, ok := quotetest.Idents(q, '"')
		if !ok || strings.Join(parts, ".") != name {
			t.Fatalf("QuoteTable(%q) = %s: reads back as %q", name, q, parts)
		}
		if want := pgx.Identifier(parts).Sanitize(); q != want {
			t.Fatalf("QuoteTable(%q) = %s, pgx.Identifier quotes %s", name, q, want)
		}
		c, err := pgxfence.QuoteColumn(name)
		if err != nil {
			if !fencetest.Match(err, fencetest.Invalid("fence: invalid identifier: ")) {
				t.Fatalf("QuoteColumn(%q) = %v: not fence.ErrInvalidArgument for an invalid identifier", name, err)
			}
			return
		}
		if parts, ok := quotetest.Idents(c, '"'); !ok || len(parts) != 1 || parts[0] != name {
			t.Fatalf("QuoteColumn(%q) = %s: reads back as %q", name, c, parts)
		}
	})
}
