package main

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	dbFile := filepath.Join(t.TempDir(), "app.db")
	tests := []struct {
		name     string
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{"no command", nil, 2, "", "no command"},
		{"unknown command", []string{"sideways"}, 2, "", `unknown command "sideways"`},
		{"gen without table", []string{"gen", "-dir", dir, "-dialect", "postgres"}, 2, "", "needs -dir and -table"},
		{"gen unknown dialect", []string{"gen", "-dir", dir, "-table", "t", "-dialect", "oracle"}, 2, "", "unknown dialect"},
		{"gen bad table", []string{"gen", "-dir", dir, "-table", "a.b.c", "-dialect", "postgres"}, 1, "", "invalid identifier"},
		{"gen", []string{"gen", "-dir", dir, "-table", "invoices", "-dialect", "postgres"}, 0, "1_add_fence_token_to_invoices.up.sql", ""},
		{"gen again", []string{"gen", "-dir", dir, "-table", "invoices", "-dialect", "postgres"}, 1, "", "already exists"},
		{"up without dsn", []string{"up", "-dialect", "sqlite"}, 2, "", "needs -dsn"},
		{"stray argument", []string{"up", "-dialect", "sqlite", "-dsn", dbFile, "extra"}, 2, "", `unexpected argument "extra"`},
		{"up", []string{"up", "-dialect", "sqlite", "-dsn", dbFile}, 0, "", ""},
		{"up again", []string{"up", "-dialect", "sqlite", "-dsn", dbFile}, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stdout.String(), tt.inStdout) || !strings.Contains(stderr.String(), tt.inStderr) {
				t.Fatalf("run(%q) = %d\nstdout: %s\nstderr: %s\nwant %d, stdout with %q, stderr with %q",
					tt.args, code, &stdout, &stderr, tt.code, tt.inStdout, tt.inStderr)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("gen left %d files, want one pair", len(entries))
	}
	db, err := sql.Open("sqlite", dbFile)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "INSERT INTO fence_tokens (resource, token) VALUES ('r', 1)"); err != nil {
		t.Fatalf("fence_tokens after up: %v", err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"down", "-dialect", "sqlite", "-dsn", dbFile}, &stdout, &stderr); code != 0 {
		t.Fatalf("down = %d: %s", code, &stderr)
	}
	if _, err := db.ExecContext(t.Context(), "SELECT 1 FROM fence_tokens"); err == nil {
		t.Fatal("fence_tokens still there after down")
	}
}
