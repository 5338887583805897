package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/testserver"
)

// startTimeout bounds how long a redis-server may take to accept connections.
const startTimeout = 30 * time.Second

// process is one redis-server this package started, with its data directory.
type process struct {
	dir     string
	port    int
	cluster bool // a cluster node, with busPort for the cluster bus
	busPort int
	args    []string
	cmd     *exec.Cmd
	exited  <-chan struct{}
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

// newProcess prepares a redis-server, a cluster node or not, in a fresh directory
// under parent (a temporary one when parent is empty) with extra settings; start
// runs it.
func newProcess(parent string, cluster bool, extra ...string) (*process, error) {
	dir, err := os.MkdirTemp(parent, "redistest-")
	if err != nil {
		return nil, err
	}
	return &process{dir: dir, cluster: cluster, args: extra}, nil
}

// start runs redis-server on free loopback ports (other ones when another process
// takes one before the server binds it) and waits until it answers.
func (p *process) start(ctx context.Context) error {
	bin, err := binary("redis-server")
	if err != nil {
		return err
	}
	n := 1
	if p.cluster {
		n = 2
	}
	return startOnFreePorts(n, func(ports []int) error {
		// A node that failed on its cluster bus port may have written nodes.conf.
		if err := os.RemoveAll(p.dir); err != nil {
			return err
		}
		if err := os.Mkdir(p.dir, 0o700); err != nil {
			return err
		}
		p.port = ports[0]
		if p.cluster {
			p.busPort = ports[1]
		}
		return p.run(ctx, bin)
	})
}

// startOnFreePorts is testserver.StartOnFreePorts, a variable for this package's
// test that takes the first port before redis-server binds it.
var startOnFreePorts = testserver.StartOnFreePorts

// restart runs redis-server again from its data on the ports it had, so that
// clients and the cluster's configuration still find it, and waits until it answers.
func (p *process) restart(ctx context.Context) error {
	bin, err := binary("redis-server")
	if err != nil {
		return err
	}
	return p.run(ctx, bin)
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
	if p.cluster {
		// Redis's default, port+10000, may be taken or past 65535.
		args = append(args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(p.busPort))
	}
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
// replays its append-only file) and INFO with its own process ID: another
// redis-server could have taken the port before this one bound it.
func (p *process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer rdb.Close()
	self := fmt.Sprintf("\r\nprocess_id:%d\r\n", p.cmd.Process.Pid)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			var info string
			if info, err = rdb.Info(ctx, "server").Result(); err == nil && !strings.Contains(info, self) {
				err = errors.New("another redis-server answers on its port")
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return errors.New("exited during startup")
		case <-ctx.Done():
			return fmt.Errorf("not answering after %v: %w", startTimeout, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
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
