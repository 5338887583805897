package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The orchestrator and a worker speak JSON lines: commands on the worker's stdin,
// events on its stdout. The worker's stderr is passed through for diagnostics.

// command is one step of the timeline the orchestrator asks a worker to take.
type command struct {
	Cmd string `json:"cmd"` // acquire, try, renew, prepare, write, release, quit
	// TotalCents is the invoice total a prepare command computes.
	TotalCents int64 `json:"total_cents,omitempty"`
	// Manual makes an acquire take the lock WithManualRenewal.
	Manual bool `json:"manual,omitempty"`
	// Unwatched makes a write present a bare fence.NewGrant instead of the lock, so
	// that the write reaches the database even when the lock client already knows
	// its lock is lost (see worker.write).
	Unwatched bool `json:"unwatched,omitempty"`
}

// event is what a worker reports back; At is the worker's wall clock when it
// happened (both processes share the machine's clock).
type event struct {
	Event     string `json:"event"` // ready, acquired, held, renewed, prepared, wrote, lost, released, error
	At        int64  `json:"at"`    // unix nanoseconds
	Token     int64  `json:"token,omitempty"`
	Lease     int64  `json:"lease_ms,omitempty"`  // the lock's lease, from At
	Holder    string `json:"holder,omitempty"`    // for held: who holds the lock
	Outcome   string `json:"outcome,omitempty"`   // for wrote: accepted, refused, failed
	Presented int64  `json:"presented,omitempty"` // for a refused write: the tokens of the *fence.StaleError
	Seen      int64  `json:"seen,omitempty"`
	Lost      bool   `json:"lost,omitempty"` // for wrote: the lock had reported its loss before the write
	Err       string `json:"err,omitempty"`
}

func (e event) time() time.Time { return time.Unix(0, e.At) }

// worker is the orchestrator's handle on one worker process.
type worker struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan event
	lost   chan event // the lock client's report that its lock is lost, whenever it comes
	mu     sync.Mutex
	frozen bool
	exited chan struct{}
	err    error // the process's exit error, valid after exited is closed
}

// startWorker re-executes this binary in the worker role with args, and starts
// reading its events. The DSN goes through the environment, not the command line,
// so that a password does not show in the process list.
func startWorker(ctx context.Context, name string, args []string, dsn string) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: locate this program: %w", name, err)
	}
	c := exec.Command(self, append([]string{"-role=server", "-name=" + name}, args...)...)
	c.Env = append(os.Environ(), dsnEnv+"="+dsn)
	c.Stderr = &prefixWriter{prefix: name + ": ", w: os.Stderr}
	setDeathSignal(c)
	stdin, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	w := &worker{name: name, cmd: c, stdin: stdin, events: make(chan event, 16), lost: make(chan event, 4), exited: make(chan struct{})}
	go w.read(stdout)
	if _, err := w.await(ctx, "ready", stepTimeout); err != nil {
		w.kill()
		return nil, err
	}
	return w, nil
}

// read decodes events until the worker closes its stdout, then reaps the process.
func (w *worker) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			e = event{Event: "error", At: time.Now().UnixNano(), Err: fmt.Sprintf("unreadable event %q: %v", sc.Text(), err)}
		}
		if e.Event == "lost" {
			select {
			case w.lost <- e:
			default:
			}
			continue
		}
		w.events <- e
	}
	w.err = w.cmd.Wait()
	close(w.events)
	close(w.exited)
}

// send writes one command line. Writing to a frozen worker is fine: the line waits
// in the pipe until the process runs again.
func (w *worker) send(c command) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := w.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: send %s: %w", w.name, c.Cmd, err)
	}
	return nil
}

// stepTimeout bounds each step of the timeline on top of the time it is meant to
// take, so that a stuck worker ends the run with an error rather than hanging it.
const stepTimeout = 30 * time.Second

// await returns the next event, which must be want, within the given time. An error
// event, another event or the worker's exit is an error naming what happened instead.
func (w *worker) await(ctx context.Context, want string, within time.Duration) (event, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case e, ok := <-w.events:
		switch {
		case !ok:
			<-w.exited
			return event{}, fmt.Errorf("%s exited while the timeline waited for %q: %v", w.name, want, w.err)
		case e.Event == "error":
			return e, fmt.Errorf("%s: %s", w.name, e.Err)
		case e.Event != want:
			return e, fmt.Errorf("%s reported %q while the timeline waited for %q", w.name, e.Event, want)
		}
		return e, nil
	case <-timer.C:
		return event{}, fmt.Errorf("%s: no %q within %v: the timeline stalled", w.name, want, within)
	case <-ctx.Done():
		return event{}, fmt.Errorf("%s: waiting for %q: %w", w.name, want, context.Cause(ctx))
	}
}

// do sends c and awaits the event that answers it.
func (w *worker) do(ctx context.Context, c command, want string) (event, error) {
	if err := w.send(c); err != nil {
		return event{}, err
	}
	return w.await(ctx, want, stepTimeout)
}

// freeze stops the whole process with SIGSTOP: every goroutine, the runtime and its
// timers stop at once, which is what a stop-the-world pause looks like from outside.
// It returns once the kernel reports the process stopped.
func (w *worker) freeze(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("%s: SIGSTOP: %w", w.name, err)
	}
	w.frozen = true
	deadline := time.Now().Add(stepTimeout)
	for {
		state, err := processState(w.cmd.Process.Pid)
		if err != nil || state == "T" {
			// Without /proc the signal's delivery cannot be observed; SIGSTOP
			// cannot be caught or ignored, so it is trusted.
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still in state %s %v after SIGSTOP", w.name, state, stepTimeout)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// thaw resumes a frozen process with SIGCONT.
func (w *worker) thaw() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.frozen {
		return nil
	}
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("%s: SIGCONT: %w", w.name, err)
	}
	w.frozen = false
	return nil
}

// stop asks the worker to quit and waits for it; a worker that does not exit within
// the grace period is killed.
func (w *worker) stop(grace time.Duration) error {
	w.thaw()
	w.send(command{Cmd: "quit"})
	w.stdin.Close()
	go func() {
		for range w.events { // drain whatever the worker still says
		}
	}()
	select {
	case <-w.exited:
		return w.err
	case <-time.After(grace):
		w.kill()
		return fmt.Errorf("%s did not exit within %v of quit; killed", w.name, grace)
	}
}

// kill ends the process at once; SIGKILL also ends a stopped process.
func (w *worker) kill() {
	w.cmd.Process.Kill()
	go func() {
		for range w.events { // let the reader reach the process's exit
		}
	}()
	<-w.exited
}

// processState returns the state letter of /proc/pid/stat ("T" when stopped).
func processState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name in parentheses may contain spaces; the state follows it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "", errors.New("unexpected /proc stat format")
	}
	return s[i+2 : i+3], nil
}

// prefixWriter prefixes each line a worker writes to stderr with its name.
type prefixWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	midway bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []byte
	for _, c := range b {
		if !p.midway {
			out = append(out, p.prefix...)
		}
		out = append(out, c)
		p.midway = c != '\n'
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}
