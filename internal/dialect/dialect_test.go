package dialect_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
)

func TestTable_limits(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     dialect.Dialect
		table string
		ok    bool
	}{
		{"postgres 63 bytes", dialect.Postgres, strings.Repeat("a", 63), true},
		{"postgres 64 bytes", dialect.Postgres, strings.Repeat("a", 64), false},
		{"postgres 32 two-byte runes", dialect.Postgres, strings.Repeat("é", 32), false},
		{"mysql 64 characters", dialect.MySQL, strings.Repeat("é", 64), true},
		{"mysql 65 characters", dialect.MySQL, strings.Repeat("a", 65), false},
		{"sqlite 128 characters", dialect.SQLite, strings.Repeat("é", 128), true},
		{"sqlite 129 characters", dialect.SQLite, strings.Repeat("a", 129), false},
		{"schema part too long", dialect.MySQL, "s." + strings.Repeat("a", 65), false},
		{"empty", dialect.SQLite, "", false},
		{"empty schema", dialect.SQLite, ".t", false},
		{"two dots", dialect.SQLite, "a.b.c", false},
		{"nul", dialect.Postgres, "a\x00b", false},
		{"not utf-8", dialect.MySQL, "a\xff", false},
		{"newline is quoted", dialect.SQLite, "a\nb", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := dialect.QuoteTable(c.d, c.table)
			if c.ok && err != nil {
				t.Fatalf("QuoteTable(%q) = %v, want success", c.table, err)
			}
			if !c.ok && (!errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "fence: invalid identifier: ")) {
				t.Fatalf("QuoteTable(%q) = %v, want fence.ErrInvalidArgument for an invalid identifier", c.table, err)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	if got := dialect.QuoteIdent(dialect.MySQL, "a`b"); got != "`a``b`" {
		t.Errorf("MySQL: %s", got)
	}
	if got, _ := dialect.QuoteTable(dialect.Postgres, `s."t`); got != `"s"."""t"` {
		t.Errorf("Postgres: %s", got)
	}
}
