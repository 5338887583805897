// Package testserver is what the throwaway test servers share (locktest's etcd,
// pgtest's PostgreSQL, mysqltest's MariaDB, redistest's Redis, s3test's S3): the
// skip-or-fail rule, free loopback ports and a start retried when one is taken
// first, a temporary directory, a server process run as its own system user that
// dies with the test binary (on Linux), and the tail of its log. Use it to start a
// server of your own the same way. It builds on Linux and macOS.
package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
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
// take it before the server binds it: StartOnFreePorts starts a server again on
// another port when that happens.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Instance is one throwaway server: its temporary directory and, once started, its
// process.
type Instance struct {
	// Dir is the temporary directory, for the server's data, socket and log.
	Dir string
	// Cred is the server's system user; nil: the current user.
	Cred *syscall.Credential

	name   string
	cmd    *exec.Cmd
	exited <-chan struct{}
}

// NewInstance makes a temporary directory for the server name (used in errors).
// prefix should be short: a Unix socket's path must fit in sun_path (108 bytes).
// When this process is root the directory is given to the system user runAs and
// the server will run as that user, since database servers refuse to run as root.
func NewInstance(name, prefix, runAs string) (*Instance, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	in := &Instance{Dir: dir, name: name}
	if os.Geteuid() != 0 {
		return in, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("running as root without a %s user: %w", runAs, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	in.Cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return in, nil
}

// Start starts cmd as in.Cred in its own process group. The server runs as a child
// of the test binary rather than daemonised, so on Linux the kernel kills it
// (Pdeathsig) if the test binary dies without cleaning up; elsewhere a killed test
// binary leaves it running. An Instance runs one process at a time: Start again
// only after Crash.
func (in *Instance) Start(cmd *exec.Cmd) error {
	if in.cmd != nil {
		return fmt.Errorf("start %s: already started", in.name)
	}
	cmd.SysProcAttr = ProcAttr(in.Cred)
	exited, err := StartChild(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", in.name, err)
	}
	in.cmd, in.exited = cmd, exited
	return nil
}

// StartChild starts cmd and returns a channel closed once it has exited (and been
// reaped). A cmd whose SysProcAttr sets Pdeathsig needs this: Pdeathsig fires when
// the OS thread that forked the child exits, not the process, and the Go runtime ends
// a thread whose locked goroutine returns (the delaying proxy's writer does). Had that
// thread forked a server, the server would die mid-test. So the fork runs on a thread
// held locked until the child exits.
func StartChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// SignalAll sends sig to the started process and every process it forked (PostgreSQL
// gives each worker a session of its own, so a process group is not enough): SIGKILL
// is a crash, SIGSTOP and SIGCONT freeze and thaw it. The started process is stopped
// while its children are listed, so none is forked unseen.
func (in *Instance) SignalAll(sig syscall.Signal) error {
	if in.cmd == nil {
		return fmt.Errorf("signal %s: not started", in.name)
	}
	pid := in.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("signal %s: %w", in.name, err)
	}
	kids := descendants(pid)
	for _, k := range kids {
		_ = syscall.Kill(k, sig) // one may have exited
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %s: %w", in.name, err)
	}
	if sig != syscall.SIGSTOP && sig != syscall.SIGKILL {
		return syscall.Kill(pid, syscall.SIGCONT)
	}
	return nil
}

// descendants lists the processes below pid, from /proc (none where there is no
// /proc, as on macOS: SignalAll then reaches the started process alone).
func descendants(pid int) []int {
	parent := map[int]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 2 {
			continue
		}
		p, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		parent[p], _ = strconv.Atoi(f[1])
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Crash kills the started process and every process it forked (SIGKILL), as the
// machine's crash would end them, waits for the started one to exit, and keeps the
// directory: Start may start the server again on its data. A process that has
// already exited is only forgotten. It returns an error if none was started.
func (in *Instance) Crash() error {
	if in.cmd == nil {
		return fmt.Errorf("crash %s: not started", in.name)
	}
	select {
	case <-in.exited:
		in.cmd = nil
		return nil
	default:
	}
	if err := in.SignalAll(syscall.SIGKILL); err != nil {
		return fmt.Errorf("crash %s: %w", in.name, err)
	}
	<-in.exited
	in.cmd = nil
	return nil
}

// Exited is closed when the started process has exited; before Start it is nil,
// which a select never receives from.
func (in *Instance) Exited() <-chan struct{} { return in.exited }

// Stop sends sig to the started process (only the PID Start started), waits for it
// to exit, and removes the directory. A process still running after 30s is killed,
// and Stop returns an error saying so.
func (in *Instance) Stop(sig os.Signal) error {
	var err error
	if in.cmd != nil {
		_ = in.cmd.Process.Signal(sig)
		select {
		case <-in.exited:
		case <-time.After(30 * time.Second):
			_ = in.cmd.Process.Kill()
			<-in.exited
			err = errors.New(in.name + " did not stop within 30s; killed")
		}
		in.cmd = nil
	}
	os.RemoveAll(in.Dir)
	return err
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
