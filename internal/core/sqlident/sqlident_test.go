package sqlident_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/sqlident"
	"github.com/fencegate/fencegate/migrations"
)

// The dialects are converted by value between the packages: the numbers must match.
func TestDialect_matchesMigrations(t *testing.T) {
	for _, c := range []struct {
		m migrations.Dialect
		s sqlident.Dialect
	}{{migrations.Postgres, sqlident.Postgres}, {migrations.MySQL, sqlident.MySQL}, {migrations.SQLite, sqlident.SQLite}} {
		if int(c.m) != int(c.s) {
			t.Errorf("migrations.%v = %d, sqlident = %d", c.m, int(c.m), int(c.s))
		}
	}
}

func TestTable_limits(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     sqlident.Dialect
		table string
		ok    bool
	}{
		{"postgres 63 bytes", sqlident.Postgres, strings.Repeat("a", 63), true},
		{"postgres 64 bytes", sqlident.Postgres, strings.Repeat("a", 64), false},
		{"postgres 32 two-byte runes", sqlident.Postgres, strings.Repeat("é", 32), false},
		{"mysql 64 characters", sqlident.MySQL, strings.Repeat("é", 64), true},
		{"mysql 65 characters", sqlident.MySQL, strings.Repeat("a", 65), false},
		{"sqlite 128 characters", sqlident.SQLite, strings.Repeat("é", 128), true},
		{"sqlite 129 characters", sqlident.SQLite, strings.Repeat("a", 129), false},
		{"schema part too long", sqlident.MySQL, "s." + strings.Repeat("a", 65), false},
		{"empty", sqlident.SQLite, "", false},
		{"empty schema", sqlident.SQLite, ".t", false},
		{"two dots", sqlident.SQLite, "a.b.c", false},
		{"nul", sqlident.Postgres, "a\x00b", false},
		{"not utf-8", sqlident.MySQL, "a\xff", false},
		{"newline is quoted", sqlident.SQLite, "a\nb", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sqlident.Table(c.d, c.table)
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
	if got := sqlident.Quote(sqlident.MySQL, "a`b"); got != "`a``b`" {
		t.Errorf("MySQL: %s", got)
	}
	if got, _ := sqlident.Table(sqlident.Postgres, `s."t`); got != `"s"."""t"` {
		t.Errorf("Postgres: %s", got)
	}
}
