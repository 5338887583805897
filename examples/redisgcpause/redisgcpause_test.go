package main_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
	"github.com/fencegate/fencegate/internal/tests/exampletest"
)

// example is the program under test, built once and run as a user runs it.
var example = exampletest.New("redisgcpause")

// node is the real Redis server the runs write to, started by the first Options.
var node redistest.Node

func TestMain(m *testing.M) {
	code := m.Run()
	node.Close()
	example.Close()
	os.Exit(code)
}

var (
	tokenRE  = regexp.MustCompile(`worker (\d) takes report-\d+: token (\d+)`)
	storedRE = regexp.MustCompile(`Redis holds: "report by worker (\d), token (\d+)"`)
)

// TestRedisgcpause runs the timeline against a real Redis and etcd: fenced, worker
// 1's stale write is refused and worker 2's report stands; with -no-fence the stale
// report lands. The exit status says the run showed what it claims, and the
// printed tokens back it.
func TestRedisgcpause(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		winner string
		output string
	}{
		{"fenced", nil, "2", "writes its stale report: refused: fence: stale token"},
		{"no-fence", []string{"-no-fence"}, "1", "writes its stale report: accepted"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := node.Options(t).Addr
			args := append([]string{"-redis", addr, "-resource", "report-" + string(rune('0'+i))}, tt.args...)
			out, code := example.Run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if !strings.Contains(out, tt.output) {
				t.Errorf("output lacks %q", tt.output)
			}
			toks := tokenRE.FindAllStringSubmatch(out, -1)
			s := storedRE.FindStringSubmatch(out)
			if len(toks) != 2 || s == nil {
				t.Fatalf("output lacks the tokens or what Redis holds")
			}
			if t1, t2 := atoi(t, toks[0][2]), atoi(t, toks[1][2]); t2 <= t1 {
				t.Fatalf("worker 2's token %s not above worker 1's %s", toks[1][2], toks[0][2])
			}
			want := map[string]string{"1": toks[0][2], "2": toks[1][2]}
			if s[1] != tt.winner || s[2] != want[tt.winner] {
				t.Fatalf("Redis holds worker %s's report (token %s), want worker %s's (token %s)", s[1], s[2], tt.winner, want[tt.winner])
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRedisgcpause_badFlags(t *testing.T) {
	for _, args := range [][]string{{"-bogus"}, {"-lease", "1s"}, {"-lease", "2500ms"}, {"-resource", ""}, {"extra"}} {
		if _, code := example.Run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
