package pgsql_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/pgsql"
)

type set struct {
	fence.Grant
	res []string
}

func (s set) Resources() []string { return s.res }

func TestRaiseLiteral(t *testing.T) {
	tests := []struct {
		name string
		g    fence.Grant
		idle string
		want []string // in the SQL
	}{
		{"plain", fence.NewGrant("acct-1", 42), "", []string{"VALUES (E'acct-1', 42)"}},
		{"quote and backslash", fence.NewGrant(`a'b\c`, 7), "", []string{`E'a''b\\c'`}},
		{"idle bound", fence.NewGrant("acct-1", 42), "1500", []string{"E'acct-1'", "42::bigint", "E'1500'"}},
		{"set", set{fence.NewGrant("a", 9), []string{"a", "b'"}}, "", []string{"ARRAY[E'a', E'b''']", "9::bigint"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := grant.Check(tt.g)
			if err != nil {
				t.Fatal(err)
			}
			q, err := pgsql.RaiseLiteral(c, tt.idle)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(q, "$") {
				t.Errorf("placeholder left in %s", q)
			}
			for _, w := range tt.want {
				if !strings.Contains(q, w) {
					t.Errorf("%s lacks %s", q, w)
				}
			}
		})
	}
}
