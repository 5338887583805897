package main

import (
	"strings"
	"testing"
)

// TestRun_help: COMMAND -h prints that command's usage line, its own flags
// (none of another command's) and an example, and exits 0.
func TestRun_help(t *testing.T) {
	tests := []struct {
		cmd   string
		has   []string // its own flags
		lacks []string // flags it does not take
	}{
		{"list", []string{"-endpoints", "-dsn", "-json", "-timeout"}, []string{"-release", "-ttl"}},
		{"show", []string{"-endpoints", "-dsn", "-json"}, []string{"-release", "-ttl"}},
		{"release", []string{"-endpoints", "-prefix"}, []string{"-dsn", "-json", "-release", "-ttl"}},
		{"tokens", []string{"-dsn", "-json"}, []string{"-endpoints", "-release", "-ttl"}},
		{"fence", []string{"-endpoints", "-dsn", "-json", "-release", "-new"}, []string{"-ttl", "-try"}},
		{"watch", []string{"-endpoints", "-json", "-exact"}, []string{"-dsn", "-release", "-ttl"}},
		{"exec", []string{"-endpoints", "-timeout", "-ttl", "-try", "-grace"}, []string{"-dsn", "-json", "-release"}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			for _, args := range [][]string{{tt.cmd, "-h"}, {"help", tt.cmd}} {
				code, out, errOut := fencectl(t, args...)
				help := out + errOut
				if code != 0 {
					t.Fatalf("fencectl %q: status %d, want 0; output %q", args, code, help)
				}
				for _, s := range append([]string{"usage: fencectl " + tt.cmd + " ", "\nexample:\n  fencectl " + tt.cmd + " "}, tt.has...) {
					if !strings.Contains(help, s) {
						t.Errorf("fencectl %q lacks %q:\n%s", args, s, help)
					}
				}
				for _, s := range tt.lacks {
					if strings.Contains(help, "  "+s+" ") || strings.Contains(help, "  "+s+"\n") {
						t.Errorf("fencectl %q shows %s, which %s does not take:\n%s", args, s, tt.cmd, help)
					}
				}
			}
		})
	}
	// A flag another command takes is refused after this one.
	if code, _, errOut := fencectl(t, "exec", "-dsn", "x.db", "job", "--", "true"); code != 2 || !strings.Contains(errOut, "-dsn") {
		t.Errorf("exec -dsn: status %d, want 2; stderr %q", code, errOut)
	}
}
