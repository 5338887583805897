package sqlfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
)

var hostileNames = []string{
	"invoices", "app.invoices", `we"ird`, "tab`le", "`; DROP TABLE fence_tokens; -- ", `"; DROP TABLE fence_tokens; --`,
	"a.b.c", ".x", "x.", "it's", "/* c */", "x\x00y", "naïve", "\u202eevil", "?", "$1", strings.Repeat("n", 65), "\xff",
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

// FuzzQuoteTable checks, in every dialect, that a table or column name the
// builders accept is quoted into exactly the identifiers it names (backticks
// for MySQL, double quotes otherwise), so no name can end its quotes and add
// SQL; and that a refused one matches fence.ErrInvalidIdentifier.
func FuzzQuoteTable(f *testing.F) {
	for _, s := range hostileNames {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, d := range []sqlfence.Dialect{sqlfence.MySQL, sqlfence.SQLite, sqlfence.Postgres} {
			qc := byte('"')
			if d == sqlfence.MySQL {
				qc = '`'
			}
			q, err := sqlfence.QuoteTable(d, name)
			if err != nil {
				if !errors.Is(err, fence.ErrInvalidIdentifier) {
					t.Fatalf("%s: QuoteTable(%q) = %v: not ErrInvalidIdentifier", d, name, err)
				}
			} else if parts, ok := lexIdents(q, qc); !ok || strings.Join(parts, ".") != name {
				t.Fatalf("%s: QuoteTable(%q) = %s: reads back as %q", d, name, q, parts)
			}
			c, err := sqlfence.QuoteColumn(d, name)
			if err != nil {
				if !errors.Is(err, fence.ErrInvalidIdentifier) {
					t.Fatalf("%s: QuoteColumn(%q) = %v: not ErrInvalidIdentifier", d, name, err)
				}
				continue
			}
			if parts, ok := lexIdents(c, qc); !ok || len(parts) != 1 || parts[0] != name {
				t.Fatalf("%s: QuoteColumn(%q) = %s: reads back as %q", d, name, c, parts)
			}
		}
	})
}
