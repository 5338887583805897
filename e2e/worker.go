//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// Event is one line of a billing worker's JSON log (examples/billing), or one of the
// test's own actions.
type Event struct {
	Time    time.Time `json:"time"`
	Worker  string    `json:"worker"`
	Kind    string    `json:"event"`
	Account string    `json:"account,omitempty"`
	Token   int64     `json:"token,omitempty"`
	Value   int64     `json:"value,omitempty"`
	Seen    int64     `json:"seen,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Err     string    `json:"error,omitempty"`
	Note    string    `json:"-"`
}

// Describe renders the event for the timeline.
func (ev Event) Describe() string {
	switch ev.Kind {
	case "note":
		return ev.Note
	case "acquired":
		return fmt.Sprintf("takes %s: token %d", ev.Account, ev.Token)
	case "read":
		return fmt.Sprintf("reads %s = %d (token %d)", ev.Account, ev.Value, ev.Token)
	case "wrote":
		return fmt.Sprintf("writes %s = %d with token %d inside its transaction; COMMIT next", ev.Account, ev.Value, ev.Token)
	case "commit":
		return fmt.Sprintf("writes %s = %d with token %d: committed", ev.Account, ev.Value, ev.Token)
	case "refused":
		if ev.Reason == "stale" {
			return fmt.Sprintf("writes %s with token %d: REFUSED by the database (token %d stored)", ev.Account, ev.Token, ev.Seen)
		}
		return fmt.Sprintf("writes %s with token %d: REFUSED by its client before any I/O (lock lost)", ev.Account, ev.Token)
	case "lost":
		return fmt.Sprintf("notices its lock on %s (token %d) is lost; %s", ev.Account, ev.Token, ev.Reason)
	case "aborted":
		return fmt.Sprintf("write to %s (token %d) failed %s, rolled back: %s", ev.Account, ev.Token, ev.Reason, ev.Err)
	case "unknown":
		return fmt.Sprintf("writes %s = %d with token %d: COMMIT OUTCOME UNKNOWN: %s", ev.Account, ev.Value, ev.Token, ev.Err)
	case "released":
		return fmt.Sprintf("releases %s (token %d)", ev.Account, ev.Token)
	default:
		s := ev.Kind
		if ev.Account != "" {
			s += " " + ev.Account
		}
		if ev.Err != "" {
			s += ": " + ev.Err
		}
		return s
	}
}

// Worker is one billing worker container.
type Worker struct {
	ID     string
	env    *Env
	res    *dockertest.Resource
	paused string // how it was paused: "freezer" or "SIGSTOP"; empty when running
}

// StartWorker runs examples/billing with the topology's endpoints and DSN plus args,
// attached to the etcd network and the database network.
func (e *Env) StartWorker(id string, args ...string) *Worker {
	e.t.Helper()
	w := &Worker{ID: id, env: e}
	cmd := append([]string{
		"-id", id,
		"-etcd", e.Endpoints(),
		"-dsn", e.WorkerDSN(),
		"-lease", Lease.String(),
	}, args...)
	w.res = e.run(&dockertest.RunOptions{
		Name: e.name(id), Hostname: id, Repository: e.images.Worker,
		NetworkID: e.etcdNet.Network.ID, Cmd: cmd,
	})
	// Docker before API 1.44 attaches one network at create; the worker retries its
	// database connection until this one is attached.
	if err := e.pool.Client.ConnectNetwork(e.dbNet.Network.ID, dc.NetworkConnectionOptions{Container: w.res.Container.ID}); err != nil {
		e.t.Fatalf("connect %s to the database network: %v", id, err)
	}
	e.mu.Lock()
	e.workers = append(e.workers, w)
	e.mu.Unlock()
	return w
}

// Setup runs the worker binary once with -setup: it applies the library's
// migrations and creates the billing tables with one zero row per account.
func (e *Env) Setup(accounts string) {
	e.t.Helper()
	r := e.run(&dockertest.RunOptions{
		Name: e.name("setup"), Repository: e.images.Worker,
		NetworkID: e.dbNet.Network.ID,
		Cmd:       []string{"-setup", "-dsn", e.WorkerDSN(), "-accounts", accounts},
	})
	code, err := e.pool.Client.WaitContainerWithContext(r.Container.ID, e.t.Context())
	if err != nil || code != 0 {
		var out strings.Builder
		_ = e.pool.Client.Logs(dc.LogsOptions{Container: r.Container.ID, OutputStream: &out, ErrorStream: &out, Stdout: true, Stderr: true})
		e.t.Fatalf("billing -setup: exit %d, %v\n%s", code, err, out.String())
	}
}

// Events returns every JSON event the worker has logged so far, across restarts.
func (w *Worker) Events() []Event {
	var out, errs bytes.Buffer
	if err := w.env.pool.Client.Logs(dc.LogsOptions{Container: w.res.Container.ID, OutputStream: &out, ErrorStream: &errs, Stdout: true}); err != nil {
		w.env.t.Errorf("logs of %s: %v", w.ID, err)
		return nil
	}
	var evs []Event
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			w.env.t.Errorf("%s logged a line that is not an event: %s", w.ID, line)
			continue
		}
		evs = append(evs, ev)
	}
	return evs
}

// Find returns the worker's events of kind (and account, when not empty).
func (w *Worker) Find(kind string) []Event {
	var r []Event
	for _, ev := range w.Events() {
		if ev.Kind == kind {
			r = append(r, ev)
		}
	}
	return r
}

// WaitFor waits until the worker has logged n events of kind and returns them.
func (w *Worker) WaitFor(kind string, n int) []Event {
	w.env.t.Helper()
	var evs []Event
	w.env.Eventually(fmt.Sprintf("%s to log %d %q events", w.ID, n, kind), func() bool {
		evs = w.Find(kind)
		if len(evs) >= n {
			return true
		}
		if c, err := w.env.pool.Client.InspectContainer(w.res.Container.ID); err == nil && !c.State.Running {
			if evs = w.Find(kind); len(evs) < n {
				w.env.t.Fatalf("%s exited (%s) without logging %d %q events", w.ID, c.State.String(), n, kind)
			}
		}
		return len(evs) >= n
	})
	return evs
}

// Pause freezes every process of the worker, as a stop-the-world pause does: the
// cgroup freezer (docker pause), or SIGSTOP where the engine refuses that.
func (w *Worker) Pause() {
	w.env.t.Helper()
	if err := w.env.pool.Client.PauseContainer(w.res.Container.ID); err == nil {
		w.paused = "freezer"
	} else if err2 := w.env.pool.Client.KillContainer(dc.KillContainerOptions{ID: w.res.Container.ID, Signal: dc.SIGSTOP}); err2 == nil {
		w.paused = "SIGSTOP"
	} else {
		w.env.t.Fatalf("pause %s: %v; SIGSTOP: %v", w.ID, err, err2)
	}
	w.env.Note("%s frozen (%s)", w.ID, w.paused)
}

// Unpause resumes a paused worker the way it was paused.
func (w *Worker) Unpause() {
	w.env.t.Helper()
	var err error
	switch w.paused {
	case "freezer":
		err = w.env.pool.Client.UnpauseContainer(w.res.Container.ID)
	case "SIGSTOP":
		err = w.env.pool.Client.KillContainer(dc.KillContainerOptions{ID: w.res.Container.ID, Signal: dc.SIGCONT})
	default:
		w.env.t.Fatalf("unpause %s: not paused", w.ID)
	}
	if err != nil {
		w.env.t.Fatalf("unpause %s: %v", w.ID, err)
	}
	w.env.Note("%s wakes up", w.ID)
	w.paused = ""
}

// Kill SIGKILLs the worker: a crash.
func (w *Worker) Kill() {
	w.env.t.Helper()
	if err := w.env.pool.Client.KillContainer(dc.KillContainerOptions{ID: w.res.Container.ID, Signal: dc.SIGKILL}); err != nil {
		w.env.t.Fatalf("kill %s: %v", w.ID, err)
	}
	w.env.mu.Lock()
	w.env.kills[w.ID]++
	w.env.mu.Unlock()
	w.env.Note("%s crashes (SIGKILL)", w.ID)
}

// Restart starts a crashed worker's container again: the same worker, a new process.
func (w *Worker) Restart() {
	w.env.t.Helper()
	w.env.restart(w.res, w.ID)
	w.env.Note("%s restarted", w.ID)
}

// Stop sends SIGTERM and waits for a clean exit.
func (w *Worker) Stop() {
	w.env.t.Helper()
	if err := w.env.pool.Client.KillContainer(dc.KillContainerOptions{ID: w.res.Container.ID, Signal: dc.SIGTERM}); err != nil {
		// Not running: it has exited on its own; Wait checks it exited cleanly.
		if _, ok := err.(*dc.ContainerNotRunning); !ok {
			w.env.t.Fatalf("stop %s: %v", w.ID, err)
		}
	}
	w.Wait()
}

// Wait waits for the worker to exit and fails the test unless it exited cleanly.
func (w *Worker) Wait() {
	w.env.t.Helper()
	code, err := w.env.pool.Client.WaitContainerWithContext(w.res.Container.ID, w.env.t.Context())
	if err != nil || code != 0 {
		w.env.t.Fatalf("%s exited with %d, %v", w.ID, code, err)
	}
}

// CutFromEtcd disconnects the worker from the etcd network; it can still reach the
// database.
func (w *Worker) CutFromEtcd() {
	w.env.t.Helper()
	if err := w.env.pool.Client.DisconnectNetwork(w.env.etcdNet.Network.ID, dc.NetworkConnectionOptions{Container: w.res.Container.ID, Force: true}); err != nil {
		w.env.t.Fatalf("disconnect %s from etcd: %v", w.ID, err)
	}
	w.env.Note("%s cut off from etcd (database still reachable)", w.ID)
}

// Reconnect attaches the worker to the etcd network again.
func (w *Worker) Reconnect() {
	w.env.t.Helper()
	if err := w.env.pool.Client.ConnectNetwork(w.env.etcdNet.Network.ID, dc.NetworkConnectionOptions{Container: w.res.Container.ID}); err != nil {
		w.env.t.Fatalf("reconnect %s to etcd: %v", w.ID, err)
	}
	w.env.Note("%s reconnected to etcd", w.ID)
}
