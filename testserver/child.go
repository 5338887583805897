package testserver

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// ChildReadyLine is the line a child started by StartFrozen prints once it holds
// what the test wants frozen.
const ChildReadyLine = "ready"

// FrozenChild is the test binary re-executed as a child process that a test froze
// with SIGSTOP, as a garbage-collection pause or a stalled VM would.
type FrozenChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// StartFrozen re-executes the test binary (running no test: the child acts on env,
// from its TestMain) and stops it with SIGSTOP once it prints ChildReadyLine. The
// child is continued and killed when t ends.
func StartFrozen(t *testing.T, env []string) *FrozenChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	out := bufio.NewScanner(stdout)
	for out.Scan() {
		if out.Text() == ChildReadyLine {
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			return &FrozenChild{cmd: cmd, stdin: stdin, out: out}
		}
	}
	t.Fatalf("child exited before it was ready: %v", out.Err())
	return nil
}

// Resume continues the child, closes its stdin (its cue to go on) and returns the
// last line it printed before it exited.
func (c *FrozenChild) Resume(t *testing.T) string {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	_ = c.stdin.Close()
	last := ""
	for c.out.Scan() {
		last = c.out.Text()
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v (%q)", err, last)
	}
	return last
}
