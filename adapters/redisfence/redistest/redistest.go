// Package redistest gives tests, benchmarks and examples real Redis servers:
// redis-server processes from the system's package (Debian's redis-server),
// started on loopback ports with their data in temporary directories. A Node is a
// single server with the append-only file synced on every write (appendonly yes,
// appendfsync always), which Restart stops and starts again from its data; a
// Cluster is three masters with every slot assigned (redis-cli --cluster create,
// no replicas). Nothing is imitated.
//
// A package's tests share one of each, whose zero values start on first use:
//
//	var node redistest.Node
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		node.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { rdb := node.Client(t) ... }
//
// The environment variable FENCEGATE_REDIS_URL (redis://host:port/db) makes a Node
// use that server instead, and FENCEGATE_REDIS_CLUSTER (host:port,host:port,...)
// makes a Cluster use those nodes. Where no server can be had (redis-server not
// installed), Client skips the test with the reason; when the environment
// variable CI is set it fails the test instead, so CI never skips.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/testserver"
)

// Environment variables naming servers to use instead of starting them.
const (
	EnvURL     = "FENCEGATE_REDIS_URL"
	EnvCluster = "FENCEGATE_REDIS_CLUSTER"
)

const hint = "install Debian's redis-server (apt-get install --no-install-recommends redis-server), or set " + EnvURL

// Node is one Redis server: a redis-server this package started (by StartNode or
// the first Client of a zero Node), or the server FENCEGATE_REDIS_URL names. It is
// safe for concurrent use; do not copy it.
type Node struct {
	// Addr is the server's host:port, set once StartNode or the first Client has
	// returned.
	Addr string

	mu    sync.Mutex
	tried bool
	err   error
	opts  *redis.Options
	proc  *process
}

// StartNode starts a redis-server with a fresh data directory, AOF on and synced
// on every write, and returns once it answers. Close stops it.
func StartNode(ctx context.Context) (*Node, error) {
	n := &Node{tried: true}
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	if url := os.Getenv(EnvURL); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return fmt.Errorf("redistest: %s: %w", EnvURL, err)
		}
		n.opts, n.Addr = opts, opts.Addr
		return nil
	}
	p, err := newProcess("", false)
	if err != nil {
		return err
	}
	if err := p.start(ctx); err != nil {
		os.RemoveAll(p.dir)
		return err
	}
	n.proc, n.Addr = p, p.addr()
	n.opts = &redis.Options{Addr: n.Addr}
	return nil
}

// ensure starts a zero Node once and returns why it could not be.
func (n *Node) ensure() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.tried {
		n.tried = true
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n.err = n.start(ctx)
		cancel()
	}
	return n.err
}

// Options returns client options for the server (a fresh copy each call), or
// skips t (fails it where CI is set) when no server can be had.
func (n *Node) Options(t testing.TB) *redis.Options {
	t.Helper()
	if err := n.ensure(); err != nil {
		testserver.Unavailable(t, "redistest: no Redis server", err, hint)
	}
	o := *n.opts
	o.PoolSize = 64
	return &o
}

// Client returns a client of the server, closed when t ends. A zero Node starts
// its server on the first call.
func (n *Node) Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(n.Options(t))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Restart stops the server this package started and starts it again from its data
// directory on the same port: crash true kills it (SIGKILL, as a power cut would
// leave the process table), false asks it to shut down (SIGTERM). Clients
// reconnect on their next command. A server named by FENCEGATE_REDIS_URL cannot be
// restarted: that is an error.
func (n *Node) Restart(ctx context.Context, crash bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return errors.New("redistest: Restart: no redis-server started by this package")
	}
	sig := syscall.SIGTERM
	if crash {
		sig = syscall.SIGKILL
	}
	if err := n.proc.stop(sig); err != nil {
		return err
	}
	return n.proc.restart(ctx)
}

// Close stops the server this package started, if any, and removes its data. It is
// safe to call more than once.
func (n *Node) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.proc
	n.proc = nil
	if p == nil {
		return nil
	}
	return p.remove()
}
