package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

// fencectl runs the command and returns its exit status and output.
func fencectl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRun_locks(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	lc, err := lockclient.New(srv.Client(t), lockclient.WithIdentity("worker-7"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	l, err := lc.Acquire(t.Context(), "invoice-42")
	if err != nil {
		t.Fatal(err)
	}
	tok := strconv.FormatInt(int64(l.Token()), 10)
	t.Setenv("FENCECTL_ENDPOINTS", eps) // flags given below override it

	tests := []struct {
		name   string
		args   []string
		code   int
		out    []string // substrings of stdout
		errOut []string // substrings of stderr
	}{
		{"list", []string{"list"}, 0, []string{"invoice-42", tok, "worker-7"}, nil},
		{"list flags after command", []string{"list", "-endpoints", eps}, 0, []string{"invoice-42"}, nil},
		{"list other prefix", []string{"-prefix", "/elsewhere/", "list"}, 0, []string{`no locks held under "/elsewhere/"`}, nil},
		{"show", []string{"show", "invoice-42"}, 0, []string{"invoice-42", tok, "worker-7"}, nil},
		{"show unknown", []string{"show", "nope"}, 1, nil, []string{`unknown lock "nope"`}},
		{"show bad name", []string{"show", "a/b"}, 2, nil, []string{"slash"}},
		{"release without token", []string{"release", "invoice-42"}, 2, nil, []string{"NAME TOKEN"}},
		{"release bad token", []string{"release", "invoice-42", "x"}, 2, nil, []string{`token "x" is not a positive integer`}},
		{"release wrong token", []string{"release", "invoice-42", "1"}, 1, nil, []string{"held with token " + tok + ", not 1"}},
		{"unknown command", []string{"frobnicate"}, 2, nil, []string{`unknown command "frobnicate"`}},
		{"no command", nil, 2, nil, []string{"usage"}},
		{"unreachable etcd", []string{"-endpoints", "127.0.0.1:1", "-timeout", "1s", "list"}, 1, nil, []string{"cannot reach etcd at 127.0.0.1:1"}},
		{"cert without key", []string{"-cert", "c.pem", "list"}, 2, nil, []string{"-cert and -key go together"}},
		{"missing CA file", []string{"-cacert", filepath.Join(t.TempDir(), "none.pem"), "list"}, 1, nil, []string{"TLS configuration"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := fencectl(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out, errOut)
			}
			for _, s := range tc.out {
				if !strings.Contains(out, s) {
					t.Errorf("stdout %q lacks %q", out, s)
				}
			}
			for _, s := range tc.errOut {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr %q lacks %q", errOut, s)
				}
			}
		})
	}

	// -json
	code, out, errOut := fencectl(t, "-json", "list")
	var got []lockJSON
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 || got[0].Token != l.Token() || got[0].ClientID != "worker-7" {
		t.Fatalf("list -json: exit %d, %q %q", code, out, errOut)
	}

	// The lock is still held after the refused releases; the right token frees it.
	if l.Context().Err() != nil {
		t.Fatal("a refused release ended the lock")
	}
	if code, _, errOut := fencectl(t, "release", "invoice-42", tok); code != 0 {
		t.Fatalf("release with the holder's token: exit %d: %s", code, errOut)
	}
	if code, _, errOut := fencectl(t, "show", "invoice-42"); code != 1 || !strings.Contains(errOut, "unknown lock") {
		t.Errorf("show after release: exit %d: %s", code, errOut)
	}
	if code, _, errOut := fencectl(t, "release", "invoice-42", tok); code != 1 || !strings.Contains(errOut, "nobody holds it") {
		t.Errorf("second release: exit %d: %s", code, errOut)
	}
}

func TestRun_tokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	s, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(*sql.Tx) error { return nil }
	for _, g := range []fence.Grant{fence.NewGrant("acct-1", 40), fence.NewGrant("acct-1", 42), fence.NewGrant("it's; DROP", 7)} {
		if err := s.Fenced(t.Context(), g, noop); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FENCECTL_DSN", "sqlite:"+path)

	tests := []struct {
		name   string
		args   []string
		code   int
		out    []string
		errOut string
	}{
		{"one", []string{"tokens", "acct-1"}, 0, []string{"acct-1", "42"}, ""},
		{"hostile resource", []string{"tokens", "it's; DROP"}, 0, []string{`"it's; DROP"`, "7"}, ""},
		{"all", []string{"tokens"}, 0, []string{"acct-1", "it's; DROP"}, ""},
		{"plain path flag", []string{"tokens", "-dsn", path, "acct-1"}, 0, []string{"42"}, ""},
		{"unknown resource", []string{"tokens", "nope"}, 1, nil, `no token stored for resource "nope"`},
		{"missing file", []string{"-dsn", filepath.Join(t.TempDir(), "no.db"), "tokens", "x"}, 1, nil, "no such file"},
		{"bad postgres DSN", []string{"-dsn", "postgres://u@host:notaport/db", "tokens", "x"}, 2, nil, "bad PostgreSQL DSN"},
		{"bad mysql DSN", []string{"-dsn", "user@tcp(127.0.0.1:3306", "tokens", "x"}, 2, nil, "bad MySQL DSN"},
		{"unreachable postgres", []string{"-timeout", "2s", "-dsn", "postgres://u@127.0.0.1:1/db?connect_timeout=1", "tokens", "x"}, 1, nil, "cannot reach the pgx database"},
		{"too many args", []string{"tokens", "a", "b"}, 2, nil, "usage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := fencectl(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out, errOut)
			}
			for _, s := range tc.out {
				if !strings.Contains(out, s) {
					t.Errorf("stdout %q lacks %q", out, s)
				}
			}
			if !strings.Contains(errOut, tc.errOut) {
				t.Errorf("stderr %q lacks %q", errOut, tc.errOut)
			}
		})
	}
	// The stored tokens are as they were: fencectl only reads.
	var tok int64
	if err := db.QueryRow("SELECT token FROM fence_tokens WHERE resource = 'acct-1'").Scan(&tok); err != nil || tok != 42 {
		t.Errorf("stored token %d, %v; want 42", tok, err)
	}
}
