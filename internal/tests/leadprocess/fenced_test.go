//go:build unix

package leadprocess_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// buildFencectl builds the fencectl command from the root module.
func buildFencectl(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fencectl")
	out, err := exec.Command("go", "build", "-C", root, "-o", bin, "./cmd/fencectl").CombinedOutput()
	if err != nil {
		t.Fatalf("build fencectl: %v\n%s", err, out)
	}
	return bin
}

// fencectlFence runs fencectl fence NAME against etcd and the candidates'
// SQLite file and returns the mark it raised.
func fencectlFence(t *testing.T, bin string, endpoints []string, db, name string) fence.Token {
	t.Helper()
	cmd := exec.Command(bin, "-endpoints", strings.Join(endpoints, ","), "-dsn", "sqlite:"+db, "-json", "fence", name)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("fencectl fence %s: %v; stderr %q", name, err, errOut.String())
	}
	var res []struct {
		After       fence.Token `json:"mark_after"`
		HolderToken fence.Token `json:"holder_token"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 {
		t.Fatalf("fencectl fence -json printed %q: %v", out.String(), err)
	}
	return res[0].After
}

// has reports whether p printed a line starting with prefix.
func (p *candidate) has(prefix string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// waitAccepted waits until p printed a fenced write of term tok accepted.
func (p *candidate) waitAccepted(t *testing.T, tok fence.Token) {
	t.Helper()
	want := strconv.FormatInt(int64(tok), 10)
	accepted := func(l string) bool {
		f := strings.Fields(l)
		return len(f) == 4 && f[0] == "write" && f[1] == want && f[3] == "ok"
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		ok := slices.ContainsFunc(p.lines, accepted)
		p.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidate %d: no write of term %d accepted", p.id, tok)
		}
	}
}

// TestLead_fenced: fencectl fence on the leader's name (the operator's fence:
// the mark raised to etcd's next token) refuses the leader's next fenced
// write with fence.ErrStale; its fn returns that error, which ends the term,
// not Lead: it steps down and campaigns again. A candidate whose place in line
// was written before the fence is refused and steps down the same way; then a
// term above the fence begins and its writes are accepted. The leader of each term is fenced in
// turn until the first fenced process leads again (two candidate processes).
func TestLead_fenced(t *testing.T) {
	bin := buildFencectl(t)
	srv := locktest.Start(t)
	e := newElection(t, "scheduler")
	first := e.start(srv.Endpoints())
	leader := e.next("first term")
	e.start(srv.Endpoints())
	for round := 1; ; round++ {
		tok := strconv.FormatInt(int64(leader.token), 10)
		leader.proc.waitAccepted(t, leader.token) // it writes under its term before the fence
		mark := fencectlFence(t, bin, srv.Endpoints(), e.db, "scheduler")
		if mark <= leader.token {
			t.Fatalf("fence raised the mark to %d, not above the leader's token %d", mark, leader.token)
		}
		leader.proc.waitLine(t, "stepdown "+tok+" ")
		next := e.next("after the fence")
		for next.token < mark {
			// A candidate already waiting in line when the fence went up holds a
			// place below it: its write is refused too, and it steps down. (A
			// place at the mark itself was written after the fence's read.)
			next.proc.waitLine(t, "stepdown "+strconv.FormatInt(int64(next.token), 10)+" ")
			next = e.next("after a term below the fence")
		}
		next.proc.waitAccepted(t, next.token)
		t.Logf("round %d: candidate %d fenced at term %d (mark %d), stepped down; candidate %d leads term %d",
			round, leader.proc.id, leader.token, mark, next.proc.id, next.token)
		for _, p := range []*candidate{leader.proc, next.proc} {
			if p.has("lead returned") {
				t.Fatalf("candidate %d's Lead returned after its term was fenced", p.id)
			}
		}
		leader = next
		if leader.proc == first {
			break // the first fenced process leads again
		}
		if round == 10 {
			t.Fatalf("candidate %d never led again after its fence", first.id)
		}
	}
	time.Sleep(200 * time.Millisecond) // the last leader writes a few times
	for _, tm := range e.check() {
		if tm.oks == 0 && tm.refused == 0 {
			continue
		}
		t.Logf("term %d (candidate %d): %d writes accepted, %d refused", tm.token, tm.proc, tm.oks, tm.refused)
	}
}
