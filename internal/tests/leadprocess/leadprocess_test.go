//go:build unix

package leadprocess_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// election runs candidate processes for one lock name and keeps what they
// print, to check the terms afterwards.
type election struct {
	t     testing.TB
	db    string
	name  string
	mu    sync.Mutex
	procs []*candidate
	begun chan termBegin
}

type candidate struct {
	id     int
	cmd    *exec.Cmd
	cuts   []*delayproxy.Proxy // its own way to each etcd member, to cut it off
	mu     sync.Mutex
	lines  []string
	closed chan struct{} // its output ended
}

type termBegin struct {
	proc  *candidate
	token fence.Token
	at    time.Time
}

func newElection(t testing.TB, name string) *election {
	db := filepath.Join(t.TempDir(), "lead.db")
	sdb, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	if err := migrations.Up(t.Context(), sdb, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.ExecContext(t.Context(), leadLogTable); err != nil {
		t.Fatal(err)
	}
	return &election{t: t, db: db, name: name, begun: make(chan termBegin, 64)}
}

// start starts a candidate whose etcd connections pass through proxies of its own.
func (e *election) start(endpoints []string) *candidate {
	t := e.t
	t.Helper()
	p := &candidate{closed: make(chan struct{})}
	var eps []string
	for _, ep := range endpoints {
		cp := startCutProxy(t, ep)
		p.cuts = append(p.cuts, cp)
		eps = append(eps, "http://"+cp.Addr())
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), candidateEnv+"="+strings.Join(eps, ",")+"|"+e.db+"|"+e.name)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start candidate: %v", err)
	}
	p.cmd = cmd
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	e.mu.Lock()
	p.id = len(e.procs)
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	go func() {
		defer close(p.closed)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			if f := strings.Fields(line); len(f) == 3 && f[0] == "begun" {
				e.begun <- termBegin{proc: p, token: fence.Token(atoi(f[1])), at: time.Unix(0, atoi(f[2]))}
			}
		}
	}()
	return p
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// next waits for the next term to begin.
func (e *election) next(what string) termBegin {
	e.t.Helper()
	select {
	case b := <-e.begun:
		return b
	case <-time.After(2 * time.Minute):
		e.t.Fatalf("%s: no term began", what)
		return termBegin{}
	}
}

func (p *candidate) signal(t testing.TB, sig syscall.Signal) time.Time {
	t.Helper()
	at := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return at
}

func (p *candidate) cut() time.Time {
	at := time.Now()
	for _, c := range p.cuts {
		c.Cut()
	}
	return at
}

func (p *candidate) mend() {
	for _, c := range p.cuts {
		c.Heal()
	}
}

// waitLine waits until the candidate printed a line with prefix.
func (p *candidate) waitLine(t testing.TB, prefix string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		ok := slices.ContainsFunc(p.lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
		p.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			p.mu.Lock()
			last := p.lines[max(0, len(p.lines)-10):]
			p.mu.Unlock()
			t.Fatalf("candidate %d never printed %q; its last lines: %q", p.id, prefix, last)
		}
	}
}

// term is one term as its process reported it.
type term struct {
	proc         int
	token        fence.Token
	begin, end   time.Time // end: the earlier of the seen end and the deadline
	seen         bool      // its process saw it end
	refused, oks int
}

// terms parses what the candidate printed: each term ends at the earlier of
// the moment its process saw it end and the last conservative deadline it
// printed before that (so a frozen or killed leader's term ends when its
// Client's deadline passed, before etcd could free the key).
func (p *candidate) terms() []term {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []term
	var deadline time.Time
	cur := -1
	for _, line := range p.lines {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "deadline":
			if d := time.Unix(0, atoi(f[1])); d.After(deadline) {
				deadline = d
			}
		case len(f) == 3 && f[0] == "begun":
			out = append(out, term{proc: p.id, token: fence.Token(atoi(f[1])), begin: time.Unix(0, atoi(f[2]))})
			cur = len(out) - 1
		case len(f) >= 4 && f[0] == "write" && cur >= 0:
			if f[3] == "ok" {
				out[cur].oks++
			} else {
				out[cur].refused++
			}
		case len(f) == 3 && f[0] == "lockended" && cur >= 0 && fence.Token(atoi(f[1])) == out[cur].token:
			seen := time.Unix(0, atoi(f[2]))
			out[cur].end, out[cur].seen = minTime(seen, deadline), true
			cur = -1
		}
	}
	if cur >= 0 { // killed while leading, or still leading: its deadline bounds it
		out[cur].end = deadline
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// check checks every term of every candidate: no two overlap on the one clock,
// tokens rise with every term, and in the database no fenced write of an older
// term landed after a newer term wrote.
func (e *election) check() []term {
	t := e.t
	t.Helper()
	e.mu.Lock()
	procs := slices.Clone(e.procs)
	e.mu.Unlock()
	var all []term
	for _, p := range procs {
		all = append(all, p.terms()...)
	}
	slices.SortFunc(all, func(a, b term) int { return a.begin.Compare(b.begin) })
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if !a.end.IsZero() && a.end.After(b.begin) {
			t.Errorf("term %d (candidate %d) until %v overlaps term %d (candidate %d) from %v by %v",
				a.token, a.proc, a.end.Format(time.StampMicro), b.token, b.proc, b.begin.Format(time.StampMicro), a.end.Sub(b.begin))
		}
		if b.token <= a.token {
			t.Errorf("term %d began after term %d: tokens must rise", b.token, a.token)
		}
	}
	db, err := sqlite.Open(e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT token FROM lead_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last, n int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if tok < last {
			t.Errorf("a write of term %d landed after term %d wrote", tok, last)
		}
		last = max(last, tok)
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d terms, %d fenced writes landed", len(all), n)
	return all
}

// TestLead_processes runs two and five candidate processes for one lock and
// takes the leader out again and again: frozen past its lease (SIGSTOP),
// killed, cut off from etcd, resigned (SIGTERM ends Lead's ctx), and killed
// while the etcd leader member is down. Each time another process leads next;
// the times are logged (TTL 2 s: the target is within the TTL + 1 s, the
// resign well under a second). Then the terms are checked: none overlap,
// tokens rise, no older term's fenced write landed after a newer one's.
func TestLead_processes(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(strconv.Itoa(n)+" candidates", func(t *testing.T) { leadFaults(t, n) })
	}
}

type leadFault struct {
	name  string
	do    func(t *testing.T, p *candidate) time.Time // takes the leader out; returns when
	after func(t *testing.T, p *candidate, tok fence.Token)
}

func leadFaults(t *testing.T, n int) {
	cl := locktest.StartCluster(t, 3)
	e := newElection(t, "scheduler")
	for range n {
		e.start(cl.Endpoints())
	}
	replace := func(t *testing.T, p *candidate, _ fence.Token) { e.start(cl.Endpoints()) }
	var stopped int
	faults := []leadFault{
		{"frozen (SIGSTOP)", func(t *testing.T, p *candidate) time.Time { return p.signal(t, syscall.SIGSTOP) },
			func(t *testing.T, p *candidate, tok fence.Token) {
				p.signal(t, syscall.SIGCONT)
				p.waitLine(t, "lockended "+strconv.FormatInt(int64(tok), 10))
			}},
		{"killed (SIGKILL)", func(t *testing.T, p *candidate) time.Time { return p.signal(t, syscall.SIGKILL) }, replace},
		{"cut off from etcd", func(t *testing.T, p *candidate) time.Time { return p.cut() },
			func(t *testing.T, p *candidate, tok fence.Token) {
				p.waitLine(t, "lockended "+strconv.FormatInt(int64(tok), 10))
				p.mend()
			}},
		{"resigned (SIGTERM)", func(t *testing.T, p *candidate) time.Time { return p.signal(t, syscall.SIGTERM) },
			func(t *testing.T, p *candidate, tok fence.Token) {
				p.waitLine(t, "lead returned")
				e.start(cl.Endpoints())
			}},
		{"killed with the etcd leader member down", func(t *testing.T, p *candidate) time.Time {
			stopped = cl.WaitLeader(t)
			cl.Stop(stopped)
			return p.signal(t, syscall.SIGKILL)
		}, func(t *testing.T, p *candidate, tok fence.Token) {
			cl.Restart(stopped)
			e.start(cl.Endpoints())
		}},
	}
	leader := e.next("first term")
	for _, f := range faults {
		at := f.do(t, leader.proc)
		next := e.next(f.name)
		if next.proc == leader.proc {
			t.Fatalf("%s: candidate %d led again (term %d)", f.name, next.proc.id, next.token)
		}
		t.Logf("%s: term %d began in candidate %d %v after", f.name, next.token, next.proc.id, next.at.Sub(at).Round(time.Millisecond))
		f.after(t, leader.proc, leader.token)
		leader = next
	}
	time.Sleep(200 * time.Millisecond) // the last leader writes a few times
	e.check()
}

// BenchmarkLead_takeover measures, with candidate processes on a single etcd
// member and WithTTL(2s), how long after the leader is frozen (SIGSTOP) or
// killed (SIGKILL), alternately, another process's term begins (target: the
// TTL + 1 s, p99 over 20), and how long after the leader's ctx ends (SIGTERM)
// its successor's begins (target: 500 ms, p99 over 20). Run it with
// -benchtime=1x; each iteration measures 20 of each.
func BenchmarkLead_takeover(b *testing.B) {
	const rounds = 20
	srv := locktest.Start(b)
	for range b.N {
		e := newElection(b, "scheduler")
		for range 3 {
			e.start(srv.Endpoints())
		}
		leader := e.next("first term")
		measure := func(sig syscall.Signal) []time.Duration {
			var ds []time.Duration
			for i := range rounds {
				time.Sleep(1500 * time.Millisecond) // every other candidate waits on the key again
				s := sig
				if sig == syscall.SIGSTOP && i%2 == 1 {
					s = syscall.SIGKILL
				}
				at := leader.proc.signal(b, s)
				next := e.next(s.String())
				ds = append(ds, next.at.Sub(at))
				switch s {
				case syscall.SIGSTOP:
					leader.proc.signal(b, syscall.SIGCONT) // it campaigns again
				default:
					e.start(srv.Endpoints())
				}
				leader = next
			}
			return ds
		}
		takeover := measure(syscall.SIGSTOP)
		handover := measure(syscall.SIGTERM)
		report(b, "takeover", takeover)
		report(b, "handover", handover)
	}
}

func report(b *testing.B, what string, ds []time.Duration) {
	slices.Sort(ds)
	p := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	b.ReportMetric(p(0.5).Seconds()*1000, what+"-p50-ms")
	b.ReportMetric(p(0.99).Seconds()*1000, what+"-p99-ms")
	b.Logf("%s over %d: p50 %v, p99 %v, min %v, max %v", what, len(ds), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}

// BenchmarkLead_takeoverEtcdLeaderLoss measures a takeover when the etcd
// leader member is stopped and the lock's leader killed together (3 members,
// three candidate processes, WithTTL(2s), 5 rounds per iteration). It takes
// about the election, plus the election timeout by which the new etcd leader
// extends every lease, plus the TTL.
func BenchmarkLead_takeoverEtcdLeaderLoss(b *testing.B) {
	const rounds = 5
	cl := locktest.StartCluster(b, 3)
	for range b.N {
		e := newElection(b, "scheduler")
		for range 3 {
			e.start(cl.Endpoints())
		}
		leader := e.next("first term")
		var ds []time.Duration
		for range rounds {
			time.Sleep(1500 * time.Millisecond)
			stopped := cl.WaitLeader(b)
			cl.Stop(stopped)
			at := leader.proc.signal(b, syscall.SIGKILL)
			next := e.next("after the etcd leader's loss")
			ds = append(ds, next.at.Sub(at))
			cl.Restart(stopped)
			e.start(cl.Endpoints())
			leader = next
		}
		report(b, "takeover", ds)
	}
}

// startCutProxy starts a proxy to the etcd member at endpoint (a URL), closed at
// the test's end: Cut partitions a candidate from the member, Heal mends.
func startCutProxy(t testing.TB, endpoint string) *delayproxy.Proxy {
	t.Helper()
	p, err := delayproxy.Start(strings.TrimPrefix(endpoint, "http://"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
