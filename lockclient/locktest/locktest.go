// Package locktest starts real etcd servers for tests: a Cluster of a single
// member (Start, StartTLS, or Run outside a test) or of n members
// (StartCluster), whose members can be stopped as by a crash and restarted from
// their data. Each member is an etcd v3.7.3 server process, so tests see real
// raft, real leases and real revisions; nothing is mocked.
//
// The etcd binary is the one the FENCEGATE_ETCD environment variable names or,
// without it, one built on first use with the go command on PATH from the Go
// module proxy and cached under the user's cache directory (keyed by the pinned
// versions and the Go version), so that only the first run on a machine builds
// it; processes that need it at once wait for one build. A test is skipped when
// no binary can be had, unless the CI environment variable is set (then it
// fails). The package imports only etcd's client, so a module that depends on
// fencegate gets no etcd server in its go.sum.
//
// Members started for a test run raft with a heartbeat of TestHeartbeat and an
// election timeout of TestElectionTimeout, shorter than etcd's defaults (100
// ms, 1 s): etcd raises a lease under 1.5 x its election timeout, rounded up to
// whole seconds, so they grant leases of 1 s where a default etcd grants 2 s,
// and a cluster that lost its leader elects another within a second. Members
// started for a benchmark, and by Run, keep etcd's defaults, so that figures are
// a default cluster's; StartConfig sets either.
//
// A package whose tests do not stop members can share one (Shared), each test
// in a key space of its own (etcd's namespace package):
//
//	var etcd = locktest.NewShared()
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		etcd.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { srv := etcd.Cluster(t); cli := srv.Client(t) ... }
//
// Revisions, leases and compaction are the member's: a test that counts
// revisions, compacts or stops a member starts a member of its own (Start).
//
// Members listen on loopback ports chosen at start (and chosen again when another
// process takes one before a member binds it), keep their data in t.TempDir()
// and are killed by t.Cleanup (and by the kernel, on Linux, if the test binary
// dies first). Clients from Client(t) are closed by t.Cleanup too.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/testserver"
)

// startTimeout bounds how long a member may take to become ready. A cold start
// takes well under a second here; the margin is for a machine busy with other
// tests.
const startTimeout = 60 * time.Second

// The raft timing of members started for a test (see the package doc).
const (
	TestHeartbeat       = 50 * time.Millisecond
	TestElectionTimeout = 500 * time.Millisecond
)

// Config is a cluster for StartConfig.
type Config struct {
	// Members is the number of members; 0 means 1.
	Members int
	// Certs, when not nil, makes the members require TLS client certificates
	// as StartTLS does.
	Certs *Certs
	// Heartbeat and ElectionTimeout are raft's timing (etcd's
	// --heartbeat-interval and --election-timeout). Zero: TestHeartbeat and
	// TestElectionTimeout for a test, etcd's defaults for a benchmark.
	Heartbeat, ElectionTimeout time.Duration
}

// Cluster is an etcd cluster of member processes: one from Start, StartTLS
// and Run, n from StartCluster.
type Cluster struct {
	t       testing.TB // nil for a Cluster from Run
	bin     string
	mu      sync.Mutex
	members []*member
	prefix  string // a Cluster from Shared: its clients' key prefix
	shared  bool   // from Shared: its members are not this Cluster's to stop
}

// Start starts a single etcd member and stops it when the test ends. It fails the
// test if the member does not become ready, and skips it when no etcd binary can
// be had and the CI environment variable is unset.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartCluster(t, 1)
}

// Run starts a single etcd member outside a test, for examples and demo
// programs, with its data in dir (which must exist). Close stops it. It returns
// the error of finding or building the etcd binary, or of starting the member.
func Run(dir string) (*Cluster, error) {
	bin, err := findBinary(context.Background())
	if err != nil {
		return nil, err
	}
	var ms []*member
	err = startOnFreePorts(2, func(ports []int) error {
		ms = newMembers(dir, ports, Config{Members: 1})
		return startMembers(bin, ms)
	})
	if err != nil {
		return nil, fmt.Errorf("locktest: %w", err)
	}
	return &Cluster{bin: bin, members: ms}, nil
}

// StartCluster starts n etcd members (n >= 1) forming one cluster, waits until
// it has a leader, and stops every member when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("locktest: cluster of %d members: need at least 1", n)
	}
	return StartConfig(t, Config{Members: n})
}

// StartConfig starts the cluster cfg describes, waits until it has a leader,
// and stops every member when the test ends.
func StartConfig(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Members < 0 {
		t.Fatalf("locktest: cluster of %d members: need at least 1", cfg.Members)
	}
	cfg.Members = max(cfg.Members, 1)
	if _, bench := t.(*testing.B); !bench && cfg.Heartbeat == 0 && cfg.ElectionTimeout == 0 {
		cfg.Heartbeat, cfg.ElectionTimeout = TestHeartbeat, TestElectionTimeout
	}
	c := &Cluster{t: t, bin: binary(t)}
	dir := t.TempDir()
	t.Cleanup(c.Close)
	err := startOnFreePorts(2*cfg.Members, func(ports []int) error {
		ms := newMembers(dir, ports, cfg)
		if err := startMembers(c.bin, ms); err != nil {
			return err
		}
		c.mu.Lock()
		c.members = ms
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatalf("locktest: %v", err)
	}
	c.WaitLeader(t)
	return c
}

// startOnFreePorts is testserver.StartOnFreePorts, a variable for this package's
// test that takes the first port before etcd binds it.
var startOnFreePorts = testserver.StartOnFreePorts

// newMembers returns the members of a new cluster cfg describes, with their
// data under dir, on ports: a peer and a client port each.
func newMembers(dir string, ports []int, cfg Config) []*member {
	scheme := "http"
	if cfg.Certs != nil {
		scheme = "https"
	}
	var ms []*member
	var initial []string
	for i := range cfg.Members {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			peerURL:   loopback("http", ports[2*i]),
			clientURL: loopback(scheme, ports[2*i+1]),
			certs:     cfg.Certs,
			heartbeat: cfg.Heartbeat,
			election:  cfg.ElectionTimeout,
		}
		ms = append(ms, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	for _, m := range ms {
		m.initial = strings.Join(initial, ",")
	}
	return ms
}

func loopback(scheme string, port int) url.URL {
	return url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// startMembers starts the members at once and waits until each answers. If one
// fails, it stops them all and removes their data, so that the cluster can be
// started afresh on other ports, and returns every member's error.
func startMembers(bin string, ms []*member) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { errs[i] = m.start(bin) })
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		for _, m := range ms {
			m.stop()
			os.RemoveAll(m.dir)
		}
	}
	return err
}

// binary returns the etcd binary, skipping the test when none can be had outside
// CI and failing it in CI.
func binary(t testing.TB) string {
	t.Helper()
	bin, err := findBinary(t.Context())
	if err == nil {
		return bin
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("locktest: no etcd binary: %v", err)
	}
	t.Skipf("locktest: no etcd binary (set %s to one, or put the go command on PATH): %v", envBinary, err)
	return ""
}

// Close stops every member as Stop does; their data stays. Clusters started for
// a test are closed by t.Cleanup; Close on them is harmless, and on a Cluster
// from Shared it does nothing.
func (c *Cluster) Close() {
	if c.shared {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(m.stop)
	}
	wg.Wait()
}
