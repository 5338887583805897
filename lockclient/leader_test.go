package lockclient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClient_leaderLoss stops the etcd leader while 16 goroutines on 4 clients
// take and release locks: acquisitions go on after the election, no two holders
// of a name overlap, no token is granted twice, and the stopped member rejoins.
func TestClient_leaderLoss(t *testing.T) {
	cl := locktest.StartCluster(t, 3)
	var mu sync.Mutex
	clients := make([]*lockclient.Client, 4)
	for i := range clients {
		// A TTL that outlives an election (locktest.TestElectionTimeout) with room.
		clients[i] = newClient(t, cl.Client(t), lockclient.WithTTL(6*time.Second))
	}
	client := func(i int) *lockclient.Client { return clients[i%len(clients)] }
	var sessionsLost int
	onErr := func(i int, err error) {
		if errors.Is(err, lockclient.ErrSessionLost) {
			// Allowed, if rare: the session's deadline passed during the election.
			// The locks it held ended; the Client's next Acquire starts a new session.
			mu.Lock()
			defer mu.Unlock()
			sessionsLost++
			return
		}
		t.Logf("goroutine %d: %v", i, err) // transient errors of a Release during the election
	}

	ex := newExclusion(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	hammer(ctx, &wg, ex, 16, []string{"a", "b", "c", "d"}, client, onErr)
	defer func() { cancel(); wg.Wait() }()

	waitGrants := func(n int, what string) {
		t.Helper()
		start := ex.count()
		for deadline := time.Now().Add(2 * time.Minute); ex.count() < start+n; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d grants, want %d more", what, ex.count()-start, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitGrants(50, "before the leader stops")
	leader := cl.WaitLeader(t)
	cl.Stop(leader)
	newLeader := cl.WaitLeader(t)
	if newLeader == leader {
		t.Fatalf("member %d still leader after it stopped", leader)
	}
	waitGrants(100, "after the election")

	cl.Restart(leader)
	waitGrants(50, "after the old leader restarted")
	cancel()
	wg.Wait()

	// The restarted member has caught up with everything granted.
	latest := revision(t, cl.Client(t))
	mc := cl.MemberClient(t, leader)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := mc.Get(t.Context(), "probe", clientv3.WithSerializable())
		if err == nil && resp.Header.Revision >= latest {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member %d did not catch up to revision %d: %v", leader, latest, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d grants, old leader %d, new leader %d, sessions lost %d", ex.count(), leader, newLeader, sessionsLost)
}
