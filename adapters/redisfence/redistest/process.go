package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/testserver"
)

// startTimeout bounds how long a redis-server may take to accept connections.
const startTimeout = 30 * time.Second

// process is one redis-server this package started, with its data directory.
type process struct {
	dir    string
	port   int
	args   []string
	cmd    *exec.Cmd
	exited <-chan struct{}
}

// binary finds redis-server on PATH or where Debian installs it.
func binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := "/usr/bin/" + name
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("redistest: %s not found (Debian: apt-get install --no-install-recommends redis-server)", name)
}

// newProcess prepares a redis-server in a fresh directory under parent (a
// temporary one when parent is empty) with extra settings; start runs it.
func newProcess(parent string, extra ...string) (*process, error) {
	dir, err := os.MkdirTemp(parent, "redistest-")
	if err != nil {
		return nil, err
	}
	return &process{dir: dir, args: extra}, nil
}

// start runs redis-server on a free loopback port (the one it had, when it ran
// before, so that clients and the cluster's configuration still find it) and
// waits until it answers.
func (p *process) start(ctx context.Context) error {
	bin, err := binary("redis-server")
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if p.port == 0 {
			if p.port, err = testserver.FreePort(); err != nil {
				return err
			}
		}
		err = p.run(ctx, bin)
		if err == nil || p.exited == nil || attempt == 2 {
			return err
		}
		// The port was taken before the server bound it; a fresh server tries another.
		if _, statErr := os.Stat(filepath.Join(p.dir, "appendonlydir")); statErr != nil {
			p.port = 0
		}
	}
}

func (p *process) run(ctx context.Context, bin string) error {
	args := append([]string{
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--dir", p.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--logfile", filepath.Join(p.dir, "redis.log"),
	}, p.args...)
	p.cmd = exec.Command(bin, args...)
	// On Linux the kernel kills the server if the test binary dies uncleanly.
	p.cmd.SysProcAttr = testserver.ProcAttr(nil)
	exited, err := testserver.StartChild(p.cmd)
	if err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	p.exited = exited
	if err := p.waitReady(ctx); err != nil {
		tail := testserver.ReadTail(filepath.Join(p.dir, "redis.log"))
		p.kill()
		return fmt.Errorf("redistest: redis-server on port %d: %w\n%s", p.port, err, tail)
	}
	return nil
}

// waitReady waits until the server answers PING with PONG (not -LOADING while it
// replays its append-only file).
func (p *process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		if ping(p.addr()) == nil {
			return nil
		}
		select {
		case <-p.exited:
			return errors.New("exited during startup")
		case <-ctx.Done():
			return fmt.Errorf("not answering after %v: %w", startTimeout, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ping sends one inline PING and wants +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", buf[:n])
	}
	return nil
}

func (p *process) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// stop ends the server with sig, SIGKILL after 10 seconds, keeping its data.
func (p *process) stop(sig syscall.Signal) error {
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	var err error
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		err = fmt.Errorf("redistest: redis-server on port %d did not stop within 10s; killed", p.port)
	}
	p.cmd, p.exited = nil, nil
	return err
}

func (p *process) kill() { _ = p.stop(syscall.SIGKILL) }

// remove stops the server and deletes its data.
func (p *process) remove() error {
	err := p.stop(syscall.SIGTERM)
	os.RemoveAll(p.dir)
	return err
}
