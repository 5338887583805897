package main_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/tests/exampletest"
)

// example is the program under test, built once and run as a user runs it.
var example = exampletest.New("scheduler")

func TestMain(m *testing.M) {
	code := m.Run()
	example.Close()
	os.Exit(code)
}

var rows = []struct {
	name string
	re   *regexp.Regexp
}{
	{"lead1", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 1 leads: token (\d+); its address 127\.0\.0\.1:7001 is stored with the lock$`)},
	{"follow", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 2 campaigns and waits; its watch says the leader is 127\.0\.0\.1:7001 \(token (\d+)\)$`)},
	{"job1", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 1 runs job \d+ with token (\d+): stored$`)},
	{"freeze", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 1 freezes \(SIGSTOP\) while building job (\d+)$`)},
	{"lead2", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 1's lease has run out; Scheduler 2 leads: token (\d+), \d+\.\d s after the freeze$`)},
	{"job2", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 2 runs job \d+ with token (\d+): stored$`)},
	{"wake", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 1 wakes up \(SIGCONT\), still building job (\d+)$`)},
	{"refused", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 1 writes job \d+ with token (\d+): refused by the database \(it has seen token (\d+)\)$`)},
	{"noticed", regexp.MustCompile(`^\s*\d+\.\d s  Scheduler 1's lock client notices its term (\d+) ended \(fence: lock lost: .*\); it campaigns again$`)},
	{"row", regexp.MustCompile(`^  job=\d+ run_by="Scheduler (\d)" fence_token=(\d+)$`)},
}

// TestScheduler runs the example as a newcomer does (no flags: a throwaway
// etcd, SQLite, a 2 s lease) and checks its timeline: the rows in order, the
// tokens rising, Scheduler 1's late job refused with Scheduler 2's token.
func TestScheduler(t *testing.T) {
	out, code := example.Run(t)
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	var order []string
	tokens := map[string][]int64{}
	for _, line := range strings.Split(out, "\n") {
		for _, r := range rows {
			if m := r.re.FindStringSubmatch(line); m != nil {
				order = append(order, r.name)
				for _, s := range m[1:] {
					n, _ := strconv.ParseInt(s, 10, 64)
					tokens[r.name] = append(tokens[r.name], n)
				}
			}
		}
	}
	// At least the four jobs of the timeline are stored; Scheduler 2 may have
	// run more by the time they are listed.
	want := "lead1 follow job1 job1 freeze lead2 job2 job2 wake refused noticed row row row row"
	if got := strings.Join(order, " "); !strings.HasPrefix(got, want) || strings.Trim(strings.TrimPrefix(got, want), " row") != "" {
		t.Fatalf("timeline rows\n%s\nwant\n%s (and maybe more rows)", got, want)
	}
	t1, t2 := tokens["lead1"][0], tokens["lead2"][0]
	if t2 <= t1 || tokens["follow"][0] != t1 {
		t.Errorf("tokens: Scheduler 1 %d (followed as %d), Scheduler 2 %d", t1, tokens["follow"][0], t2)
	}
	if r := tokens["refused"]; r[0] != t1 || r[1] != t2 {
		t.Errorf("refused write: token %d, database had %d; want %d and %d", r[0], r[1], t1, t2)
	}
	if tokens["noticed"][0] != t1 {
		t.Errorf("noticed the end of term %d, want %d", tokens["noticed"][0], t1)
	}
	if !strings.Contains(out, "Scheduler 1's late job was refused where it lands") {
		t.Error("no verdict line")
	}
}
