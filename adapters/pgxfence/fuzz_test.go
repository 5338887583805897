package pgxfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

var hostileNames = []string{
	"invoices", "public.invoices", `we"ird`, `"; DROP TABLE fence_tokens; --`, "a.b.c", ".x", "x.",
	"tab`le", "it's", "/* c */", "x\x00y", "naïve", "\u202eevil", "$1", "?", strings.Repeat("n", 64), "\xff",
}

// lexIdents reads s as SQL identifiers quoted with q (q doubled inside) joined
// by dots, and fails for anything else: a quoted name that ends early, or text
// outside the quotes, would be SQL of its own.
func lexIdents(s string, q byte) ([]string, bool) {
	var parts []string
	for {
		if s == "" || s[0] != q {
			return nil, false
		}
		s = s[1:]
		var b strings.Builder
		for {
			i := strings.IndexByte(s, q)
			if i < 0 {
				return nil, false
			}
			b.WriteString(s[:i])
			s = s[i+1:]
			if s != "" && s[0] == q {
				b.WriteByte(q)
				s = s[1:]
				continue
			}
			break
		}
		parts = append(parts, b.String())
		if s == "" {
			return parts, true
		}
		if s[0] != '.' {
			return nil, false
		}
		s = s[1:]
	}
}

// FuzzQuoteTable checks that a table name the builders accept is quoted into
// exactly the identifiers it names (pgx.Identifier's quoting), so no name can
// end its quotes and add SQL; and that a refused one matches
// fence.ErrInvalidIdentifier.
func FuzzQuoteTable(f *testing.F) {
	for _, s := range hostileNames {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		q, err := pgxfence.QuoteTable(name)
		if err != nil {
			if !errors.Is(err, fence.ErrInvalidIdentifier) {
				t.Fatalf("QuoteTable(%q) = %v: not ErrInvalidIdentifier", name, err)
			}
			return
		}
		parts, ok := lexIdents(q, '"')
		if !ok || strings.Join(parts, ".") != name {
			t.Fatalf("QuoteTable(%q) = %s: reads back as %q", name, q, parts)
		}
		if want := pgx.Identifier(parts).Sanitize(); q != want {
			t.Fatalf("QuoteTable(%q) = %s, pgx.Identifier quotes %s", name, q, want)
		}
		c, err := pgxfence.QuoteColumn(name)
		if err != nil {
			if !errors.Is(err, fence.ErrInvalidIdentifier) {
				t.Fatalf("QuoteColumn(%q) = %v: not ErrInvalidIdentifier", name, err)
			}
			return
		}
		if parts, ok := lexIdents(c, '"'); !ok || len(parts) != 1 || parts[0] != name {
			t.Fatalf("QuoteColumn(%q) = %s: reads back as %q", name, c, parts)
		}
	})
}
