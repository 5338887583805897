package sqldialect_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/sqldialect"
)

func TestTable_limits(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     sqldialect.Dialect
		table string
		ok    bool
	}{
		{"postgres 63 bytes", sqldialect.Postgres, strings.Repeat("a", 63), true},
		{"postgres 64 bytes", sqldialect.Postgres, strings.Repeat("a", 64), false},
		{"postgres 32 two-byte runes", sqldialect.Postgres, strings.Repeat("é", 32), false},
		{"mysql 64 characters", sqldialect.MySQL, strings.Repeat("é", 64), true},
		{"mysql 65 characters", sqldialect.MySQL, strings.Repeat("a", 65), false},
		{"sqlite 128 characters", sqldialect.SQLite, strings.Repeat("é", 128), true},
		{"sqlite 129 characters", sqldialect.SQLite, strings.Repeat("a", 129), false},
		{"schema part too long", sqldialect.MySQL, "s." + strings.Repeat("a", 65), false},
		{"empty", sqldialect.SQLite, "", false},
		{"empty schema", sqldialect.SQLite, ".t", false},
		{"two dots", sqldialect.SQLite, "a.b.c", false},
		{"nul", sqldialect.Postgres, "a\x00b", false},
		{"not utf-8", sqldialect.MySQL, "a\xff", false},
		{"newline is quoted", sqldialect.SQLite, "a\nb", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sqldialect.Table(c.d, c.table)
			if c.ok && err != nil {
				t.Fatalf("Table(%q) = %v, want success", c.table, err)
			}
			if !c.ok && (!errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "fence: invalid identifier: ")) {
				t.Fatalf("Table(%q) = %v, want fence.ErrInvalidArgument for an invalid identifier", c.table, err)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	if got := sqldialect.Quote(sqldialect.MySQL, "a`b"); got != "`a``b`" {
		t.Errorf("MySQL: %s", got)
	}
	if got, _ := sqldialect.Table(sqldialect.Postgres, `s."t`); got != `"s"."""t"` {
		t.Errorf("Postgres: %s", got)
	}
}
