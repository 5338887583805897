// Package testserver holds what pgtest and mysqltest share to run a throwaway database
// server for tests: the skip-or-fail rule, a free loopback port, a server process run
// as its own system user that dies with the test binary, and the tail of its log.
package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Unavailable ends t because no server can be had: it skips t with why, err and hint,
// or fails it when the environment variable CI is set, so CI never skips. what names
// the missing server with its package, as in "pgtest: no PostgreSQL server".
func Unavailable(t testing.TB, what string, err error, hint string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping): %v", what, err)
	}
	t.Skipf("%s, skipping: %v (%s)", what, err, hint)
}

// DBName names the seq-th test database of this process, unique on a shared server.
func DBName(seq int) string { return fmt.Sprintf("fgtest_%d_%d", os.Getpid(), seq) }

// FreePort returns a loopback TCP port that was free a moment ago. Another process can
// take it before the server binds it, so callers retry a server that fails to start.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RunAs prepares dir for a server that refuses to run as root: when this process is
// root it gives dir to the system user name and returns that user's credential; else
// it returns nil (run as the current user).
func RunAs(dir, name string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root without a %s user: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Proc is a server process started by Start.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts cmd as cred (nil: the current user) in its own process group. The server
// runs as a child of the test binary rather than daemonised, so the kernel kills it
// (Pdeathsig) if the test binary dies without cleaning up. name is used in errors.
func Start(name string, cmd *exec.Cmd, cred *syscall.Credential) (*Proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Stop sends sig to the process (only the PID Start started) and waits for it to exit;
// after 30s it kills it and returns an error saying so.
func (p *Proc) Stop(sig os.Signal) error {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New(p.name + " did not stop within 30s; killed")
	}
}

// ReadTail returns the last lines of the file at path (a server's log), or why it
// cannot be read.
func ReadTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return Tail(string(b))
}

// Tail returns the last 15 lines of s, enough to show why a server did not start.
func Tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}
