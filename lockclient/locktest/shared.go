package locktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// Shared is one etcd member that the tests of a package share (see the
// package doc): it starts on first use, with the timing of a test's members,
// and Close stops it and removes its data. Each test's clients keep their keys
// under a prefix of the test's, so tests that share it, in parallel too, do
// not see each other's keys.
type Shared struct {
	mu    sync.Mutex
	tried bool
	err   error // why no member can be had
	c     *Cluster
	dir   string
	seq   int
}

// NewShared returns a Shared that starts its member on the first call to Cluster.
func NewShared() *Shared { return &Shared{} }

// Cluster returns t's share of the member, starting the member on first use: a
// Cluster whose Client and MemberClient keep their keys under Prefix, a prefix
// of t's own. Its Stop and Restart fail t (the member is shared), and it needs
// no Close. Cluster skips t when no etcd binary can be had, or fails it when
// the CI environment variable is set.
func (s *Shared) Cluster(t testing.TB) *Cluster {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tried {
		s.tried = true
		s.err = s.start()
	}
	if s.err != nil {
		if errors.Is(s.err, errNoBinary) {
			binary(t) // skips t, or fails it in CI
		}
		t.Fatalf("locktest: shared member: %v", s.err)
	}
	s.seq++
	return &Cluster{t: t, bin: s.c.bin, members: s.c.members, prefix: fmt.Sprintf("/test-%d/", s.seq), shared: true}
}

var errNoBinary = errors.New("no etcd binary")

func (s *Shared) start() error {
	bin, err := findBinary(context.Background())
	if err != nil {
		return fmt.Errorf("%w: %w", errNoBinary, err)
	}
	if s.dir, err = os.MkdirTemp("", "locktest-shared-"); err != nil {
		return err
	}
	var ms []*member
	err = startOnFreePorts(2, func(ports []int) error {
		ms = newMembers(s.dir, ports, Config{Members: 1, Heartbeat: TestHeartbeat, ElectionTimeout: TestElectionTimeout})
		return startMembers(bin, ms)
	})
	if err != nil {
		return err
	}
	s.c = &Cluster{bin: bin, members: ms}
	return nil
}

// Close stops the member, if it was started, and removes its data.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		s.c.Close()
		s.c = nil
	}
	if s.dir == "" {
		return nil
	}
	err := os.RemoveAll(s.dir)
	s.dir = ""
	return err
}

// Prefix returns the key prefix under which the clients of a Cluster from
// Shared keep their keys ("" for any other Cluster): a process of the test's
// own that shares the member reaches the test's keys through a client
// namespaced with it (Namespace).
func (c *Cluster) Prefix() string { return c.prefix }

// Namespace makes cli keep its keys under prefix, as etcd's namespace package
// does (its KV, Watcher and Lease), and returns it; an empty prefix leaves cli
// as it is.
func Namespace(cli *clientv3.Client, prefix string) *clientv3.Client {
	if prefix != "" {
		cli.KV = namespace.NewKV(cli.KV, prefix)
		cli.Watcher = namespace.NewWatcher(cli.Watcher, prefix)
		cli.Lease = namespace.NewLease(cli.Lease, prefix)
	}
	return cli
}
