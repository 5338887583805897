package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

// waitBound keeps a broken run from hanging: every step takes about a lease.
const waitBound = 2 * time.Minute

// proc is a scheduler process and the events it printed.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan event
}

func startScheduler(self, name, addr, endpoints, dbPath string, lease, every time.Duration) (*proc, error) {
	cmd := exec.Command(self, "-role=scheduler", "-name", name, "-addr", addr, "-etcd", endpoints,
		"-db", dbPath, "-lease", lease.String(), "-every", every.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, events: make(chan event, 256)}
	go func() {
		defer close(p.events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				p.events <- e
			}
		}
	}()
	return p, nil
}

// wait returns the process's next event of kind, skipping others.
func (p *proc) wait(kind string) (event, error) {
	timeout := time.After(waitBound)
	for {
		select {
		case e, ok := <-p.events:
			if !ok {
				return event{}, fmt.Errorf("%s exited before its %q event", p.name, kind)
			}
			if e.Event == kind {
				return e, nil
			}
		case <-timeout:
			return event{}, fmt.Errorf("%s: no %q event within %v", p.name, kind, waitBound)
		}
	}
}

func (p *proc) signal(sig syscall.Signal) time.Time {
	at := time.Now()
	p.cmd.Process.Signal(sig)
	return at
}

// stop ends the process: its stdin closes, and it resigns and exits.
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.stdin.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// timeline prints one row per step, timed from the start of the run.
type timeline struct {
	out   io.Writer
	start time.Time
}

func (tl *timeline) row(at int64, format string, args ...any) {
	d := time.Unix(0, at).Sub(tl.start)
	fmt.Fprintf(tl.out, "%5.1f s  %s\n", d.Seconds(), fmt.Sprintf(format, args...))
}

// orchestrate runs the two schedulers through the freeze and reports whether
// the run showed what it claims.
func orchestrate(ctx context.Context, endpoints string, lease, every time.Duration, stdout, stderr io.Writer) (bool, error) {
	dir, err := os.MkdirTemp("", "scheduler-example-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	if endpoints == "" {
		cl, err := locktest.Run(filepath.Join(dir, "etcd"))
		if err != nil {
			return false, fmt.Errorf("start etcd: %w", err)
		}
		defer cl.Close()
		endpoints = strings.Join(cl.Endpoints(), ",")
	}
	dbPath := filepath.Join(dir, "jobs.db")
	if err := setupDB(ctx, dbPath); err != nil {
		return false, err
	}
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	fmt.Fprintf(stdout, "Scheduler failover timeline (lease %v, a job every %v, SQLite %s)\n\ntime    event\n", lease, every, filepath.Base(dbPath))
	tl := &timeline{out: stdout, start: time.Now()}
	s1, err := startScheduler(self, "Scheduler 1", "127.0.0.1:7001", endpoints, dbPath, lease, every)
	if err != nil {
		return false, err
	}
	defer s1.stop()
	var s2 *proc
	defer func() {
		if s2 != nil {
			s2.stop() // after the verdict: stopping it hands the lock back to Scheduler 1
		}
	}()
	r, err := failover(tl, s1, func() (*proc, error) {
		s2, err = startScheduler(self, "Scheduler 2", "127.0.0.1:7002", endpoints, dbPath, lease, every)
		return s2, err
	})
	if err != nil {
		return false, err
	}
	return r.verdict(ctx, stdout, dbPath, lease)
}

// result is what the run showed.
type result struct {
	token1, token2 int64
	frozenJob      int
	lateOutcome    string
	took           time.Duration
}

// failover drives the run: Scheduler 1 leads, Scheduler 2 is started (start2)
// and follows, Scheduler 1 is frozen mid-job, Scheduler 2 takes over,
// Scheduler 1 wakes and its late job is refused. The caller stops both.
func failover(tl *timeline, s1 *proc, start2 func() (*proc, error)) (result, error) {
	var r result
	e, err := s1.wait("lead")
	if err != nil {
		return r, err
	}
	r.token1 = e.Token
	tl.row(e.At, "Scheduler 1 leads: token %d; its address 127.0.0.1:7001 is stored with the lock", e.Token)
	s2, err := start2() // once Scheduler 1 leads
	if err != nil {
		return r, err
	}
	if e, err = s2.wait("follow"); err != nil {
		return r, err
	}
	tl.row(e.At, "Scheduler 2 campaigns and waits; its watch says the leader is %s (token %d)", e.Leader, e.Token)
	for range 2 {
		if e, err = s1.wait("job"); err != nil {
			return r, err
		}
		tl.row(e.At, "Scheduler 1 runs job %d with token %d: %s", e.Job, e.Token, e.Outcome)
	}
	if e, err = s1.wait("start"); err != nil {
		return r, err
	}
	r.frozenJob = e.Job
	frozen := s1.signal(syscall.SIGSTOP)
	tl.row(frozen.UnixNano(), "Scheduler 1 freezes (SIGSTOP) while building job %d", e.Job)
	if e, err = s2.wait("lead"); err != nil {
		return r, err
	}
	r.token2, r.took = e.Token, time.Unix(0, e.At).Sub(frozen)
	tl.row(e.At, "Scheduler 1's lease has run out; Scheduler 2 leads: token %d, %.1f s after the freeze", e.Token, r.took.Seconds())
	for range 2 {
		if e, err = s2.wait("job"); err != nil {
			return r, err
		}
		tl.row(e.At, "Scheduler 2 runs job %d with token %d: %s", e.Job, e.Token, e.Outcome)
	}
	woke := s1.signal(syscall.SIGCONT)
	tl.row(woke.UnixNano(), "Scheduler 1 wakes up (SIGCONT), still building job %d", r.frozenJob)
	if e, err = s1.wait("job"); err != nil {
		return r, err
	}
	r.lateOutcome = e.Outcome
	if e.Outcome == "refused" {
		tl.row(e.At, "Scheduler 1 writes job %d with token %d: refused by the database (it has seen token %d)", e.Job, e.Token, e.Seen)
	} else {
		tl.row(e.At, "Scheduler 1 writes job %d with token %d: %s %s", e.Job, e.Token, e.Outcome, e.Err)
	}
	if e, err = s1.wait("ended"); err != nil {
		return r, err
	}
	tl.row(e.At, "Scheduler 1's lock client notices its term %d ended (%s); it campaigns again", e.Token, e.Cause)
	return r, nil
}

// verdict prints the stored jobs and reports whether the run showed what it
// claims: Scheduler 2 took over with a higher token, Scheduler 1's late job
// was refused, and every stored job carries the token of the term that ran it.
func (r result) verdict(ctx context.Context, out io.Writer, dbPath string, lease time.Duration) (bool, error) {
	db, err := sqlite.Open(dbPath)
	if err != nil {
		return false, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT job, run_by, fence_token FROM scheduler_jobs ORDER BY job`)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	fmt.Fprintln(out, "\nstored jobs:")
	ok := r.token2 > r.token1 && r.lateOutcome == "refused"
	for rows.Next() {
		var job int
		var by string
		var tok int64
		if err := rows.Scan(&job, &by, &tok); err != nil {
			return false, err
		}
		fmt.Fprintf(out, "  job=%d run_by=%q fence_token=%d\n", job, by, tok)
		if want := r.token1; job >= r.frozenJob {
			if want = r.token2; tok != want {
				ok = false
			}
		} else if tok != want {
			ok = false
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	if ok {
		fmt.Fprintf(out, "\nThe schedule ran on one machine at a time: Scheduler 2 took over %.1f s after the freeze (lease %v), and Scheduler 1's late job was refused where it lands.\n", r.took.Seconds(), lease)
	} else {
		fmt.Fprintln(out, "\nThe run did not show what it claims (see the rows above).")
	}
	return ok, nil
}

func setupDB(ctx context.Context, path string) error {
	db, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, createJobs)
	return err
}
