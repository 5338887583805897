package scenario

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Launcher starts the worker processes of a run. Without Config.Launcher each
// worker is a child process of the test; package scenario/container starts each in
// a container.
type Launcher interface {
	// Host is the loopback or host address the workers reach the test process on:
	// the run's control connection and each worker's etcd proxy listen there.
	Host() string
	// Launch starts the test binary with args and env added to its environment,
	// its output to out.
	Launch(t *testing.T, worker string, args, env []string, out io.Writer) (Handle, error)
}

// Handle is one launched worker.
type Handle interface {
	Freeze() error // stops every thread of the worker before it returns
	Thaw() error
	Kill() error
	Wait() error // returns once the worker has ended
	String() string
}

// processes is the default Launcher: the test binary as a child process.
type processes struct{}

func (processes) Host() string { return "127.0.0.1" }

func (processes) Launch(t *testing.T, worker string, args, env []string, out io.Writer) (Handle, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("scenario: start worker %s: %w", worker, err)
	}
	return process{cmd}, nil
}

type process struct{ cmd *exec.Cmd }

func (p process) Freeze() error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	waitStopped(p.cmd.Process.Pid)
	return nil
}

func (p process) Thaw() error    { return p.cmd.Process.Signal(syscall.SIGCONT) }
func (p process) Kill() error    { return p.cmd.Process.Kill() }
func (p process) Wait() error    { return p.cmd.Wait() }
func (p process) String() string { return fmt.Sprintf("pid %d", p.cmd.Process.Pid) }
