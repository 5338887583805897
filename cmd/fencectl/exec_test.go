//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// syncBuffer is a bytes.Buffer safe for a command's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fencectlAsync runs fencectl in a goroutine; its status arrives on the channel.
func fencectlAsync(ctx context.Context, out, errOut *syncBuffer, args ...string) <-chan int {
	res := make(chan int, 1)
	go func() { res <- run(ctx, args, out, errOut) }()
	return res
}

func waitStatus(t *testing.T, res <-chan int, errOut *syncBuffer) int {
	t.Helper()
	select {
	case code := <-res:
		return code
	case <-time.After(2 * time.Minute):
		t.Fatalf("fencectl did not exit; stderr:\n%s", errOut)
		return 0
	}
}

// waitHolder waits until name is held by a token other than not.
func waitHolder(t *testing.T, lc *lockclient.Client, name string, not fence.Token) lockclient.Info {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		info, err := lc.Holder(t.Context(), name)
		if err == nil && info.Token != not {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not taken: %v", name, err)
		}
	}
}

func TestRun_exec_status(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	tests := []struct {
		name string
		argv []string
		want int
	}{
		{"success", []string{"true"}, 0},
		{"exit status passed through", []string{"sh", "-c", "exit 7"}, 7},
		{"killed by a signal", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"no such command", []string{"/nonexistent/command"}, 127},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := fencectl(t, append([]string{"-endpoints", eps, "exec", "job", "--"}, tt.argv...)...)
			if code != tt.want {
				t.Fatalf("status %d, want %d; stderr:\n%s", code, tt.want, errOut)
			}
		})
	}
	// The command sees the lock's name and token; the lock is released after.
	code, out, errOut := fencectl(t, "-endpoints", eps, "exec", "-ttl", "3s", "job", "--", "sh", "-c", `echo "$FENCEGATE_LOCK $FENCEGATE_TOKEN"`)
	name, tok, _ := strings.Cut(strings.TrimSpace(out), " ")
	if n, err := strconv.ParseInt(tok, 10, 64); code != 0 || name != "job" || err != nil || n <= 0 {
		t.Fatalf("status %d, output %q (stderr %q); want the lock's name and a token", code, out, errOut)
	}
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if _, err := lc.Holder(t.Context(), "job"); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("after exec: Holder = %v, want released", err)
	}
	for _, args := range [][]string{{"exec", "job"}, {"exec", "a/b", "--", "true"}, {"exec", "-ttl", "500ms", "job", "--", "true"}} {
		if code, _, _ := fencectl(t, append([]string{"-endpoints", eps}, args...)...); code != 2 {
			t.Errorf("fencectl %q: status %d, want 2 (usage)", args, code)
		}
	}
}

// TestRun_exec_waits: a second exec of a held name waits for it; -try exits
// at once with status 75 and runs nothing.
func TestRun_exec_waits(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	held, err := lc.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	code, _, errOut := fencectl(t, "-endpoints", eps, "exec", "-try", "job", "--", "touch", marker)
	if code != exitHeld || !strings.Contains(errOut, "held by") {
		t.Fatalf("-try on a held lock: status %d, stderr %q; want %d naming the holder", code, errOut, exitHeld)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("-try ran the command while the lock was held")
	}

	var out, eo syncBuffer
	res := fencectlAsync(t.Context(), &out, &eo, "-endpoints", eps, "exec", "job", "--", "sh", "-c", `echo "$FENCEGATE_TOKEN"`)
	select {
	case code := <-res:
		t.Fatalf("exec returned %d while the lock was held; stderr %q", code, eo.String())
	case <-time.After(300 * time.Millisecond):
	}
	if out.String() != "" {
		t.Fatalf("command ran while the lock was held: %q", out.String())
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code := waitStatus(t, res, &eo); code != 0 {
		t.Fatalf("status %d; stderr %q", code, eo.String())
	}
	if n, _ := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64); fence.Token(n) <= held.Token() {
		t.Fatalf("token %q after the holder's %d", out.String(), held.Token())
	}
}

// TestRun_exec_lost: when the lock's key is deleted while the command runs,
// the command gets SIGTERM (then SIGKILL, if it ignores it) and exec exits 76.
func TestRun_exec_lost(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	tests := []struct {
		name   string
		script string
		want   string // on the command's output
	}{
		{"SIGTERM", `trap 'echo got TERM; exit 0' TERM; echo started; while :; do sleep 0.05; done`, "got TERM"},
		{"SIGKILL after the grace period", `trap 'echo ignoring TERM' TERM; echo started; while :; do sleep 0.05; done`, "ignoring TERM"},
	}
	var last fence.Token
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, eo syncBuffer
			res := fencectlAsync(t.Context(), &out, &eo, "-endpoints", eps, "exec", "-grace", "500ms", "job", "--", "sh", "-c", tt.script)
			info := waitHolder(t, lc, "job", last)
			last = info.Token
			for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "started"); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("command did not start: %q %q", out.String(), eo.String())
				}
			}
			if err := lc.Release(t.Context(), "job", info.Token); err != nil { // fencectl release
				t.Fatal(err)
			}
			if code := waitStatus(t, res, &eo); code != exitLost {
				t.Fatalf("status %d, want %d; stderr %q", code, exitLost, eo.String())
			}
			if !strings.Contains(out.String(), tt.want) || !strings.Contains(eo.String(), "lost") {
				t.Fatalf("output %q, stderr %q; want %q and the loss told", out.String(), eo.String(), tt.want)
			}
		})
	}
}

// TestRun_watch prints the holder's changes as they happen.
func TestRun_watch(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var out, eo syncBuffer
	res := fencectlAsync(ctx, &out, &eo, "-endpoints", eps, "watch", "job")
	waitOutput := func(s string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), s); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("watch printed %q, want %q; stderr %q", out.String(), s, eo.String())
			}
		}
	}
	waitOutput("free     job")
	l, err := lc.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	tok := strconv.FormatInt(int64(l.Token()), 10)
	waitOutput("taken    job rev=" + tok + " token=" + tok + " holder=" + lc.ID())
	l.Release(t.Context())
	waitOutput("released job")
	cancel()
	if code := waitStatus(t, res, &eo); code != 0 {
		t.Fatalf("status %d after interrupt; stderr %q", code, eo.String())
	}
	if code, _, _ := fencectl(t, "-endpoints", eps, "watch", "a/b"); code != 2 {
		t.Fatalf("watch of a bad name: status %d, want 2", code)
	}
}

// TestRun_watch_star: a lock whose name ends in "*" is watched alone with -exact;
// without it, 'NAME*' is the prefix watch.
func TestRun_watch_star(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	tests := []struct {
		name   string
		args   []string
		ready  string // printed once the watch is in place, if waited for
		sees   []string
		misses []string
	}{
		{"-exact", []string{"watch", "-exact", "report-*"}, "free     report-*", []string{"taken    report-*"}, []string{"report-x"}},
		{"prefix", []string{"watch", "report-*"}, "", []string{"taken    report-x", "taken    report-*"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var out, eo syncBuffer
			res := fencectlAsync(ctx, &out, &eo, append([]string{"-endpoints", eps}, tc.args...)...)
			waitOutput := func(s string) {
				t.Helper()
				for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), s); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("watch printed %q, want %q; stderr %q", out.String(), s, eo.String())
					}
				}
			}
			if tc.ready != "" {
				waitOutput(tc.ready)
			} // else: live events or the current state print the same "taken" lines
			var locks []*lockclient.Lock
			for _, n := range []string{"report-x", "report-*"} { // report-x first: a prefix watch prints it first
				l, err := lc.Acquire(t.Context(), n)
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
			for _, s := range tc.sees {
				waitOutput(s)
			}
			for _, s := range tc.misses {
				if strings.Contains(out.String(), s) {
					t.Errorf("watch printed %q:\n%s", s, out.String())
				}
			}
			for _, l := range locks {
				l.Release(t.Context())
			}
			cancel()
			if code := waitStatus(t, res, &eo); code != 0 {
				t.Fatalf("status %d after interrupt; stderr %q", code, eo.String())
			}
		})
	}
}

// asFencectlEnv makes the test binary run as fencectl (TestMain), for tests
// that signal the fencectl process itself.
const asFencectlEnv = "FENCECTL_TEST_AS_FENCECTL"

// TestRun_exec_frozen freezes the fencectl process itself (SIGSTOP) past its
// lease while its command runs: the lock passes on; when fencectl wakes it
// notices the loss, stops the command with SIGTERM and exits 76. (While
// fencectl is frozen, its command runs on: its writes fenced with
// FENCEGATE_TOKEN are what the database refuses once the successor wrote.)
func TestRun_exec_frozen(t *testing.T) {
	srv := locktest.Start(t)
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	var out, errOut syncBuffer
	cmd := exec.Command(os.Args[0], "-endpoints", strings.Join(srv.Endpoints(), ","), "exec", "-ttl", "1s", "-grace", "5s", "job", "--",
		"sh", "-c", `trap 'echo got TERM; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
	cmd.Env = append(os.Environ(), asFencectlEnv+"=1")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() })
	held := waitHolder(t, lc, "job", 0)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "started"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("command did not start: %q %q", out.String(), errOut.String())
		}
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	next, err := lc.Acquire(t.Context(), "job") // once fencectl's lease ran out
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= held.Token {
		t.Fatalf("token %d after fencectl's %d", next.Token(), held.Token)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitLost {
		t.Fatalf("fencectl exec: %v, want exit status %d; stderr %q", err, exitLost, errOut.String())
	}
	if !strings.Contains(out.String(), "got TERM") || !strings.Contains(errOut.String(), "lost") {
		t.Fatalf("output %q, stderr %q; want the command stopped by SIGTERM and the loss told", out.String(), errOut.String())
	}
	if info, err := lc.Holder(t.Context(), "job"); err != nil || info.Token != next.Token() {
		t.Fatalf("Holder after fencectl exited = %+v, %v; want the successor's token %d", info, err, next.Token())
	}
}
