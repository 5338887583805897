package locktest

import (
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Endpoints returns the client URLs of all members, running or not, one per
// member in the order of their indexes, so that a client made from them finds a
// member that comes back.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL.String())
	}
	return eps
}

// Client returns a new etcd client of all members, closed when the test ends.
// It uses neither TLS nor credentials; a Cluster from Shared namespaces it
// (Prefix).
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return Namespace(newClient(t, c.Endpoints(), "locktest: client"), c.prefix)
}

// MemberClient returns a client that talks to member i only, closed when the test
// ends; use it to check what one member has.
func (c *Cluster) MemberClient(t testing.TB, i int) *clientv3.Client {
	t.Helper()
	c.check(t, i)
	return Namespace(newClient(t, []string{c.members[i].clientURL.String()}, "locktest: client of a member"), c.prefix)
}

func newClient(t testing.TB, endpoints []string, what string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// leader returns the index of the running member that says it is leader, or -1
// when none does (each member is asked, with a second to answer).
func (c *Cluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if _, leader, ok := m.raftStatus(); ok && leader {
			return i
		}
	}
	return -1
}

// WaitLeader waits until a running member is leader and returns its index (at
// once if one is). It fails the test if none is elected within a minute.
func (c *Cluster) WaitLeader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		if i := c.leader(); i >= 0 {
			return i
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("locktest: no leader elected")
	return -1
}

// Stop kills member i's process as a crash would (SIGKILL, no leadership
// transfer). Stopping the leader makes the others elect a new one, if a majority
// remains. A bad i, or a member of Shared, fails the cluster's test (see fail).
func (c *Cluster) Stop(i int) {
	if !c.has(i) || !c.own() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[i].stop()
}

// Restart starts stopped member i again from its data, on the same ports, and
// waits until it answers as a member of the cluster. A bad i, a running member
// or a failed start fails the cluster's test (see fail).
func (c *Cluster) Restart(i int) {
	if !c.has(i) || !c.own() {
		return
	}
	c.mu.Lock()
	m := c.members[i]
	if m.running() {
		c.mu.Unlock()
		c.fail("locktest: member %d is running", i)
		return
	}
	err := m.start(c.bin)
	c.mu.Unlock()
	if err != nil {
		c.fail("locktest: restart: %v", err)
	}
}

// Term returns the highest raft term among the running members: it rises with
// every election, so a test or benchmark can tell whether one happened.
func (c *Cluster) Term() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var term uint64
	for _, m := range c.members {
		if t, _, ok := m.raftStatus(); ok {
			term = max(term, t)
		}
	}
	return term
}

// has reports whether member i exists, and fails the cluster's test if not.
func (c *Cluster) has(i int) bool {
	if i < 0 || i >= len(c.members) {
		c.fail("locktest: no member %d in a cluster of %d", i, len(c.members))
		return false
	}
	return true
}

// own reports whether the members are c's to stop, and fails c's test if
// they are Shared.
func (c *Cluster) own() bool {
	if c.shared {
		c.fail("locktest: the member is shared (Shared): start a cluster of your own to stop one")
		return false
	}
	return true
}

// fail fails the test that started the cluster. A Cluster from Run has no test:
// the message goes to standard error and the call that failed does nothing.
func (c *Cluster) fail(format string, args ...any) {
	if c.t == nil {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return
	}
	c.t.Helper()
	c.t.Fatalf(format, args...)
}

func (c *Cluster) check(t testing.TB, i int) {
	t.Helper()
	if i < 0 || i >= len(c.members) {
		t.Fatalf("locktest: no member %d in a cluster of %d", i, len(c.members))
	}
}
