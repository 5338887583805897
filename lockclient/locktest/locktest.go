// Package locktest starts a real etcd server in-process for tests: a single member
// (Start) or a cluster of n members (StartCluster) whose members can be stopped as
// by a crash and restarted from their data. It runs go.etcd.io/etcd/server/v3/embed,
// the same server code as the etcd binary, so tests see real raft, real leases and
// real revisions; nothing is mocked.
//
// Members listen on loopback ports chosen at start, keep their data in t.TempDir()
// and are stopped by t.Cleanup. Clients from Client(t) are closed by t.Cleanup too.
package locktest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds how long a member may take to become ready. A cold start
// takes ~0.5 s here; the margin is for a machine busy with other tests.
const startTimeout = 60 * time.Second

// Server is a single-member etcd cluster.
type Server struct {
	c *Cluster
}

// Start starts a single etcd member and stops it when the test ends. It fails the
// test if the member does not become ready.
func Start(t testing.TB) *Server {
	t.Helper()
	return &Server{c: StartCluster(t, 1)}
}

// Run starts a single etcd member outside a test, for examples and demo
// programs, with its data in dir (which must exist). Close stops it.
func Run(dir string) (*Server, error) {
	m := &member{
		name: "m0",
		dir:  filepath.Join(dir, "m0"),
	}
	for _, u := range []*url.URL{&m.peerURL, &m.clientURL} {
		addr, err := freeLoopback()
		if err != nil {
			return nil, err
		}
		*u = url.URL{Scheme: "http", Host: addr}
	}
	m.initial = m.name + "=" + m.peerURL.String()
	if err := m.start(); err != nil {
		return nil, fmt.Errorf("locktest: %w", err)
	}
	return &Server{c: &Cluster{members: []*member{m}}}, nil
}

// Close stops the member. Servers from Start are stopped by t.Cleanup; Close on
// them is harmless.
func (s *Server) Close() { s.c.stopAll() }

// Endpoints returns the member's client URL.
func (s *Server) Endpoints() []string { return s.c.Endpoints() }

// Client returns a new etcd client of the member, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return s.c.Client(t)
}

// Cluster is an etcd cluster of n members in this process.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	members []*member
}

type member struct {
	name      string
	dir       string
	peerURL   url.URL
	clientURL url.URL
	initial   string // the initial-cluster string every member shares
	etcd      *embed.Etcd
}

// StartCluster starts n etcd members (n >= 1) forming one cluster, waits until
// it has a leader, and stops every member when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("locktest: cluster of %d members: need at least 1", n)
	}
	c := &Cluster{t: t}
	dir := t.TempDir()
	var initial []string
	for i := range n {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			peerURL:   url.URL{Scheme: "http", Host: freeAddr(t)},
			clientURL: url.URL{Scheme: "http", Host: freeAddr(t)},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	t.Cleanup(c.stopAll)
	errs := make(chan error, n)
	for _, m := range c.members {
		m.initial = strings.Join(initial, ",")
		go func() { errs <- m.start() }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("locktest: %v", err)
		}
	}
	c.WaitLeader(t)
	return c
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("locktest: no free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (m *member) config() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = "locktest"
	// Shutdown logs errors about closed listeners that are expected here; start
	// failures come back from StartEtcd.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.Metrics = "basic"
	cfg.EnableGRPCGateway = false
	return cfg
}

func (m *member) start() error {
	e, err := embed.StartEtcd(m.config())
	if err != nil {
		return fmt.Errorf("start member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("member %s failed: %v", m.name, err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("member %s not ready after %v", m.name, startTimeout)
	}
	m.etcd = e
	return nil
}

// stop ends the member the way a crash would: raft stops at once (no leadership
// transfer), then the listeners close. The data stays for Restart.
func (m *member) stop() {
	if m.etcd == nil {
		return
	}
	m.etcd.Server.HardStop()
	m.etcd.Close()
	m.etcd = nil
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(m.stop)
	}
	wg.Wait()
}

// Endpoints returns the client URLs of all members, running or not, so that a
// client made from them finds a member that comes back.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL.String())
	}
	return eps
}

// Client returns a new etcd client of all members, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("locktest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Size is the number of members, running or stopped.
func (c *Cluster) Size() int { return len(c.members) }

// Leader returns the index of the member that is leader, or -1 when no running
// member knows one.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.etcd == nil {
			continue
		}
		s := m.etcd.Server
		if lead := s.Leader(); lead != 0 && lead == s.MemberID() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until a running member is leader and returns its index. It
// fails the test if none is elected within a minute.
func (c *Cluster) WaitLeader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		if i := c.Leader(); i >= 0 {
			return i
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("locktest: no leader elected")
	return -1
}

// Stop stops member i as a crash would (no leadership transfer). Stopping the
// leader makes the others elect a new one, if a majority remains.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.members) {
		c.t.Fatalf("locktest: no member %d in a cluster of %d", i, len(c.members))
	}
	c.members[i].stop()
}

// Restart starts stopped member i again from its data, on the same ports, and
// waits until it has rejoined the cluster (knows the leader and has caught up).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	if i < 0 || i >= len(c.members) {
		c.mu.Unlock()
		c.t.Fatalf("locktest: no member %d in a cluster of %d", i, len(c.members))
	}
	m := c.members[i]
	if m.etcd != nil {
		c.mu.Unlock()
		c.t.Fatalf("locktest: member %d is running", i)
	}
	err := m.start()
	c.mu.Unlock()
	if err != nil {
		c.t.Fatalf("locktest: restart: %v", err)
	}
}

// Term returns the highest raft term among the running members: it rises with
// every election, so a test or benchmark can tell whether one happened.
func (c *Cluster) Term() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var term uint64
	for _, m := range c.members {
		if m.etcd != nil {
			term = max(term, m.etcd.Server.Term())
		}
	}
	return term
}

// Running reports whether member i runs.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].etcd != nil
}

// MemberClient returns a client that talks to member i only, closed when the test
// ends; use it to check what one member has.
func (c *Cluster) MemberClient(t testing.TB, i int) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{c.members[i].clientURL.String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("locktest: client of member %d: %v", i, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
