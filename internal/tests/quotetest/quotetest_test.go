package quotetest_test

import (
	"slices"
	"testing"

	"github.com/fencegate/fencegate/internal/tests/quotetest"
)

func TestIdents(t *testing.T) {
	tests := []struct {
		name string
		in   string
		q    byte
		want []string
		ok   bool
	}{
		{"one", `"a"`, '"', []string{"a"}, true},
		{"qualified", `"app"."t"`, '"', []string{"app", "t"}, true},
		{"doubled quote", `"we""ird"`, '"', []string{`we"ird`}, true},
		{"backticks", "`ta``ble`", '`', []string{"ta`ble"}, true},
		{"ends early", `"a"; DROP TABLE t; --"`, '"', nil, false},
		{"unterminated", `"a`, '"', nil, false},
		{"bare", "a", '"', nil, false},
		{"empty", "", '"', nil, false},
		{"trailing dot", `"a".`, '"', nil, false},
		{"other quote", "`a`", '"', nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := quotetest.Idents(tt.in, tt.q)
			if ok != tt.ok || !slices.Equal(got, tt.want) {
				t.Fatalf("Idents(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}
