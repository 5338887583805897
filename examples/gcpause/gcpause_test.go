package main_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
	"github.com/fencegate/fencegate/internal/tests/exampletest"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// example is the program under test, built once per test binary and run as a user
// runs it: a separate process with flags.
var example = exampletest.New("gcpause")

// postgres is a throwaway PostgreSQL (or FENCEGATE_POSTGRES_DSN's server), started on
// first use.
var postgres = pgtest.New()

// mariadb is a throwaway MariaDB (or FENCEGATE_MYSQL_DSN's server).
var mariadb = mysqltest.New()

func TestMain(m *testing.M) {
	code := m.Run()
	postgres.Close()
	mariadb.Close()
	example.Close()
	os.Exit(code)
}

// timeline is what a run's output says, parsed from the table and the row below it.
type timeline struct {
	s1Token, s2Token, heldToken int64
	s1Write, s2Write            string
	row                         string
	order                       []string // which rows appeared, in order
}

var rows = []struct {
	name string
	re   *regexp.Regexp
}{
	{"take1", regexp.MustCompile(`^\d+\.\d s\s+Server 1 takes account-42: token (\d+), lease to \d+\.\d s$`)},
	{"renew", regexp.MustCompile(`^\d+\.\d s\s+Server 1 renews: lease to \d+\.\d s$`)},
	{"ready", regexp.MustCompile(`^\d+\.\d s\s+Server 1 has its invoice ready \(\$120\.00\)`)},
	{"freeze", regexp.MustCompile(`^\d+\.\d s\s+Server 1 freezes \(garbage collection\): SIGSTOP`)},
	{"held", regexp.MustCompile(`^\d+\.\d s\s+Server 2 asks for account-42: held by Server 1 with token (\d+), so it waits$`)},
	{"expire", regexp.MustCompile(`^\d+\.\d s\s+Server 1's lease runs out: etcd deletes its key`)},
	{"take2", regexp.MustCompile(`^\d+\.\d s\s+Server 2 takes account-42: token (\d+) \(its place in line\), lease to \d+\.\d s$`)},
	{"write2", regexp.MustCompile(`^\d+\.\d s\s+Server 2 writes the invoice with token (\d+)(?: and no fencing)?: (.*)$`)},
	{"write1", regexp.MustCompile(`^\d+\.\d s\s+Server 1 wakes up \(SIGCONT\), writes with token (\d+)(?: and no fencing)?: (.*)$`)},
	{"noticed", regexp.MustCompile(`^\d+\.\d s\s+Server 1's lock client (?:notices|has still not noticed) its lock is lost`)},
	{"row", regexp.MustCompile(`^  (account=account-42 total=.*)$`)},
}

func parse(t *testing.T, out string) timeline {
	t.Helper()
	var tl timeline
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("token %q: %v", s, err)
		}
		return n
	}
	for _, line := range strings.Split(out, "\n") {
		for _, r := range rows {
			m := r.re.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			tl.order = append(tl.order, r.name)
			switch r.name {
			case "take1":
				tl.s1Token = num(m[1])
			case "held":
				tl.heldToken = num(m[1])
			case "take2":
				tl.s2Token = num(m[1])
			case "write2":
				if num(m[1]) != tl.s2Token {
					t.Errorf("Server 2 wrote with token %s, took %d", m[1], tl.s2Token)
				}
				tl.s2Write = m[2]
			case "write1":
				if num(m[1]) != tl.s1Token {
					t.Errorf("Server 1 wrote with token %s, took %d", m[1], tl.s1Token)
				}
				tl.s1Write = m[2]
			case "row":
				tl.row = m[1]
			}
		}
	}
	want := []string{"take1", "renew", "ready", "freeze", "held", "expire", "take2", "write2"}
	got := tl.order
	if len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
		t.Fatalf("table rows %v, want %v followed by Server 1's write and its notice", got, want)
	}
	rest := strings.Join(got[len(want):], " ")
	if rest != "write1 noticed row" && rest != "noticed write1 row" {
		t.Fatalf("rows after Server 2's write: %q, want Server 1's write, its lock's notice and the stored row", rest)
	}
	if !strings.HasPrefix(out, "GC-pause timeline") || !strings.Contains(out, "\ntime    event\n") {
		t.Errorf("output lacks the heading or the table header")
	}
	if tl.heldToken != tl.s1Token {
		t.Errorf("Server 2 saw the lock held with token %d; Server 1 took token %d", tl.heldToken, tl.s1Token)
	}
	if tl.s1Token <= 0 || tl.s2Token <= tl.s1Token {
		t.Errorf("tokens %d then %d: they must go up", tl.s1Token, tl.s2Token)
	}
	return tl
}

// The newcomer's command: no flags at all (embedded etcd, SQLite, 10 s lease).
func TestGCPause_fenced(t *testing.T) {
	t.Parallel()
	out, code := example.Run(t)
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	checkFenced(t, out)
}

func checkFenced(t *testing.T, out string) {
	t.Helper()
	tl := parse(t, out)
	if tl.s2Write != "accepted" {
		t.Errorf("Server 2's write: %q, want accepted", tl.s2Write)
	}
	if want := fmt.Sprintf("refused (the database has seen token %d)", tl.s2Token); tl.s1Write != want {
		t.Errorf("Server 1's stale write: %q, want %q", tl.s1Write, want)
	}
	if want := fmt.Sprintf(`account=account-42 total=$135.00 written_by="Server 2" fence_token=%d`, tl.s2Token); tl.row != want {
		t.Errorf("stored row %q, want %q", tl.row, want)
	}
	if want := fmt.Sprintf("token %d presented, %d already seen (fence.ErrStale)", tl.s1Token, tl.s2Token); !strings.Contains(out, want) {
		t.Errorf("summary lacks %q", want)
	}
}

func TestGCPause_noFence(t *testing.T) {
	t.Parallel()
	out, code := example.Run(t, "-no-fence", "-lease", "5s")
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	tl := parse(t, out)
	if tl.s2Write != "accepted" || tl.s1Write != "accepted, overwriting Server 2's invoice" {
		t.Errorf("writes: Server 2 %q, Server 1 %q; without fencing both land", tl.s2Write, tl.s1Write)
	}
	if want := fmt.Sprintf(`account=account-42 total=$120.00 written_by="Server 1" fence_token=%d`, tl.s1Token); tl.row != want {
		t.Errorf("stored row %q, want the stale invoice %q", tl.row, want)
	}
	if !strings.Contains(out, "replaced Server 2's") {
		t.Errorf("summary does not say the stale invoice replaced Server 2's")
	}
}

func TestGCPause_postgres(t *testing.T) {
	t.Parallel()
	dsn := postgres.DSN(t)
	out, code := example.Run(t, "-postgres", dsn, "-lease", "5s")
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	checkFenced(t, out)
}

// The -etcd and -mysql flags together: a real 3-member etcd cluster (in the test's
// process) instead of the embedded member, and MariaDB through sqlfence.
func TestGCPause_mysqlOnEtcdCluster(t *testing.T) {
	t.Parallel()
	dsn := mariadb.DSN(t)
	cluster := locktest.StartCluster(t, 3)
	out, code := example.Run(t, "-mysql", dsn, "-etcd", strings.Join(cluster.Endpoints(), ","), "-lease", "5s")
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	if !strings.Contains(out, "etcd at "+strings.Join(cluster.Endpoints(), ",")) || !strings.Contains(out, "MySQL ") {
		t.Errorf("heading does not name the cluster and MySQL")
	}
	checkFenced(t, out)
}

func TestGCPause_badFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"lease too short", []string{"-lease", "1s"}, "-lease 1s"},
		{"lease not whole seconds", []string{"-lease", "2500ms"}, "whole seconds"},
		{"two databases", []string{"-postgres", "postgres://x", "-mysql", "u@tcp(x)/db"}, "exclusive"},
		{"stray argument", []string{"now"}, "unexpected arguments"},
		{"bad resource", []string{"-resource", "a/b"}, "-resource"},
		{"unknown role", []string{"-role", "client"}, "unknown -role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), example.Binary(t), tt.args...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("gcpause %v: %v, want exit status 2\n%s", tt.args, err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("gcpause %v said %q, want it to name %q", tt.args, out, tt.want)
			}
		})
	}
}
