package pgsql_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/pgsql"
)

// TestMarkedStale reads the stored token (and, for a set, the resource) from the
// refusal the raise makes, whatever words the server's lc_messages puts around it.
func TestMarkedStale(t *testing.T) {
	tests := []struct {
		msg  string
		seen fence.Token
		res  string
		ok   bool
	}{
		{`invalid input syntax for type bigint: "fencegate-stale:41"`, 41, "", true},
		{`ungültige Eingabesyntax für Typ bigint: »fencegate-stale:7«`, 7, "", true},
		{`invalid input syntax for type bigint: "fencegate-stale:9/res-"a""`, 9, `res-"a"`, true},
		{`invalid input syntax for type bigint: "abc"`, 0, "", false},
		{`invalid input syntax for type bigint: "fencegate-stale:"`, 0, "", false},
	}
	for _, tt := range tests {
		seen, res, ok := pgsql.MarkedStale(tt.msg)
		if seen != tt.seen || res != tt.res || ok != tt.ok {
			t.Errorf("PGMarkedStale(%q) = %d, %q, %v; want %d, %q, %v", tt.msg, seen, res, ok, tt.seen, tt.res, tt.ok)
		}
	}
}

// TestUpdateSQL checks the argument order both PostgreSQL adapters bind: the
// resource, the token, the set values, the key values.
func TestUpdateSQL(t *testing.T) {
	for _, bump := range []bool{true, false} {
		q := pgsql.UpdateSQL(`"t"`, `"tok"`, []string{`"k1"`, `"k2"`}, []string{`"a"`, `"b"`}, bump)
		for _, want := range []string{
			`"a" = $3, "b" = $4, "tok" = $2 WHERE "k1" = $5 AND "k2" = $6 AND "tok" <= $2`,
			"$1::varchar",
			"AND EXISTS (SELECT 1 FROM fencegate_raised)",
		} {
			if !strings.Contains(q, want) {
				t.Errorf("bump=%v: %s\nlacks %s", bump, q, want)
			}
		}
		if strings.Contains(q, "$7") {
			t.Errorf("bump=%v: a placeholder past the six arguments: %s", bump, q)
		}
	}
}

func TestReplyLost(t *testing.T) {
	tests := []struct {
		name, state, severity string
		want                  bool
	}{
		{"an ERROR decides", "23505", "ERROR", false},
		{"a FATAL may follow the commit", "XX000", "FATAL", true},
		{"a PANIC may follow the commit", "XX000", "PANIC", true},
		{"a terminated backend", "57P01", "FATAL", true},
		{"ended idle before COMMIT arrived", pgsql.IdleTimeout, "FATAL", false},
		{"no severity: a connection exception", "08006", "", true},
		{"no severity: operator intervention", "57P02", "", true},
		{"no severity: a serialization failure", pgsql.Serialization, "", false},
		{"no severity: idle timeout", pgsql.IdleTimeout, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pgsql.ReplyLost(tt.state, tt.severity); got != tt.want {
				t.Errorf("PGReplyLost(%q, %q) = %v, want %v", tt.state, tt.severity, got, tt.want)
			}
		})
	}
}
