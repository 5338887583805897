package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

func TestTable_limits(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     engine.Dialect
		table string
		ok    bool
	}{
		{"postgres 63 bytes", engine.Postgres, strings.Repeat("a", 63), true},
		{"postgres 64 bytes", engine.Postgres, strings.Repeat("a", 64), false},
		{"postgres 32 two-byte runes", engine.Postgres, strings.Repeat("é", 32), false},
		{"mysql 64 characters", engine.MySQL, strings.Repeat("é", 64), true},
		{"mysql 65 characters", engine.MySQL, strings.Repeat("a", 65), false},
		{"sqlite 128 characters", engine.SQLite, strings.Repeat("é", 128), true},
		{"sqlite 129 characters", engine.SQLite, strings.Repeat("a", 129), false},
		{"schema part too long", engine.MySQL, "s." + strings.Repeat("a", 65), false},
		{"empty", engine.SQLite, "", false},
		{"empty schema", engine.SQLite, ".t", false},
		{"two dots", engine.SQLite, "a.b.c", false},
		{"nul", engine.Postgres, "a\x00b", false},
		{"not utf-8", engine.MySQL, "a\xff", false},
		{"newline is quoted", engine.SQLite, "a\nb", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := engine.QuoteTable(c.d, c.table)
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
	if got := engine.QuoteIdent(engine.MySQL, "a`b"); got != "`a``b`" {
		t.Errorf("MySQL: %s", got)
	}
	if got, _ := engine.QuoteTable(engine.Postgres, `s."t`); got != `"s"."""t"` {
		t.Errorf("Postgres: %s", got)
	}
}
