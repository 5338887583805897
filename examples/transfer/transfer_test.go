package main_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", to read the file back

	"github.com/fencegate/fencegate/internal/tests/exampletest"
)

// example is the program under test, built once per test binary and run as a user
// runs it: a separate process with flags.
var example = exampletest.New("transfer")

func TestMain(m *testing.M) {
	code := m.Run()
	example.Close()
	os.Exit(code)
}

var (
	doneRE  = regexp.MustCompile(`(?m)^done: 60 transfers, 60 distinct tokens, at most 1 set holder at once$`)
	endRE   = regexp.MustCompile(`(?m)^end: account-42 \$910\.00, account-7 \$1090\.00 \(total \$2000\.00\)$`)
	marksRE = regexp.MustCompile(`(?m)^stored tokens: account-42 (\d+), account-7 (\d+) \(the last set's token: (\d+)\)$`)
	staleRE = regexp.MustCompile(`(?m)^worker C wakes and writes account-7 = \$1000\.00 with token \d+: refused \(the database has seen token (\d+)\)$`)
)

// TestTransfer runs the example: 30 transfers each way under set locks listed in
// opposite orders finish (no deadlock), never overlap, keep the total, and raise
// both accounts' stored tokens to the last set's token, so the frozen single
// holder of account-7 is refused.
func TestTransfer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bank.db")
	out, code := example.Run(t, "-transfers", "30", "-sqlite", path)
	for _, re := range []*regexp.Regexp{doneRE, endRE, marksRE} {
		if !re.MatchString(out) {
			t.Fatalf("output lacks %q:\n%s", re, out)
		}
	}
	m := marksRE.FindStringSubmatch(out)
	if m[1] != m[3] {
		t.Fatalf("account-42's stored token %s, want the last set's %s", m[1], m[3])
	}
	if code != 0 || m[2] != m[3] {
		t.Fatalf("exit %d; account-7's stored token %s, want the last set's %s:\n%s", code, m[2], m[3], out)
	}
	if s := staleRE.FindStringSubmatch(out); s == nil || s[1] != m[3] {
		t.Fatalf("worker C's stale write was not refused by token %s:\n%s", m[3], out)
	}
	// The file holds what the run printed.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var c7 int64
	if err := db.QueryRow(`SELECT cents FROM transfer_accounts WHERE account = 'account-7'`).Scan(&c7); err != nil || c7 != 109000 {
		t.Fatalf("account-7 holds %d cents, %v; want 109000", c7, err)
	}
}

func TestTransfer_badFlags(t *testing.T) {
	for _, args := range [][]string{{"-transfers", "0"}, {"extra"}, {"-nope"}} {
		if out, code := example.Run(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2:\n%s", args, code, out)
		}
	}
}
