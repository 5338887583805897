package scenario

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/fencegate/fencegate/testserver"
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
	// Pdeathsig fires when the OS thread that forked the worker ends, and the
	// run's delaying proxies end theirs: the fork runs on a thread held until
	// the worker exits (a worker was seen SIGKILLed mid-run otherwise).
	exited, err := testserver.StartChild(cmd)
	if err != nil {
		return nil, fmt.Errorf("scenario: start worker %s: %w", worker, err)
	}
	return process{cmd, exited}, nil
}

type process struct {
	cmd    *exec.Cmd
	exited <-chan struct{} // closed once the worker has exited and been reaped
}

func (p process) Freeze() error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	waitStopped(p.cmd.Process.Pid)
	return nil
}

func (p process) Thaw() error { return p.cmd.Process.Signal(syscall.SIGCONT) }
func (p process) Kill() error { return p.cmd.Process.Kill() }
func (p process) Wait() error {
	<-p.exited
	if ps := p.cmd.ProcessState; ps != nil && !ps.Success() {
		return &exec.ExitError{ProcessState: ps}
	}
	return nil
}

func (p process) String() string { return fmt.Sprintf("pid %d", p.cmd.Process.Pid) }
