package scenario

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/lockclient/locktest"
)

// leaderTimeout bounds the wait for a leader to kill.
const leaderTimeout = time.Minute

// members is the size of the cluster the kit starts.
func (c Config) members() int { return max(c.EtcdMembers, 1) }

// startEtcd starts the run's etcd (or takes Config.EtcdEndpoints) and returns a
// client of every member and their endpoints; the cluster is nil when the kit
// did not start it.
func startEtcd(t *testing.T, cfg Config) (*locktest.Cluster, *clientv3.Client, []string, error) {
	t.Helper()
	if eps := cfg.EtcdEndpoints; len(eps) > 0 {
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("scenario: Config.EtcdEndpoints: %w", err)
		}
		t.Cleanup(func() { cli.Close() })
		return nil, cli, eps, nil
	}
	c := locktest.StartCluster(t, cfg.members())
	return c, c.Client(t), c.Endpoints(), nil
}

// crashMember kills member i, noting role ("leader" or "") in the event, and
// returns the undo that restarts it.
func (r *run) crashMember(i int, role string) (func(), error) {
	r.mu.Lock()
	if r.down[i] {
		r.mu.Unlock()
		return nil, fmt.Errorf("etcd member %d is down already: an earlier crash has not restarted it yet (its Until point)", i)
	}
	r.down[i] = true
	r.mu.Unlock()
	r.cluster.Stop(i)
	at := time.Now()
	if role != "" {
		role = " (" + role + ")"
	}
	r.event(etcdTimeline, "member %d%s killed", i, role)
	return func() { r.restartMember(i, at) }, nil
}

// restartMember starts member i again (locktest fails the test if it cannot),
// unless the run is over: the cluster is then stopped anyway.
func (r *run) restartMember(i int, at time.Time) {
	select {
	case <-r.closed:
		return
	default:
	}
	r.cluster.Restart(i)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down[i] = false
	r.eventLocked(etcdTimeline, "member %d restarted (down %v)", i, time.Since(at).Round(time.Millisecond))
}

// majorityUp reports whether enough members run to elect a leader.
func (r *run) majorityUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	up := len(r.endpoints)
	for _, d := range r.down {
		if d {
			up--
		}
	}
	return up > len(r.endpoints)/2
}

// leader returns the index of the running member that says it is leader, or -1.
func (r *run) leader() int {
	for i, ep := range r.endpoints {
		r.mu.Lock()
		down := r.down[i]
		r.mu.Unlock()
		if down {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := r.etcd.Status(ctx, ep)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// waitLeader returns the leader's index once one is elected, or -1 when none can
// be (no majority), the run is closed or none is elected within leaderTimeout.
func (r *run) waitLeader() int {
	deadline := time.Now().Add(leaderTimeout)
	for time.Now().Before(deadline) && r.majorityUp() {
		if i := r.leader(); i >= 0 {
			return i
		}
		select {
		case <-r.closed:
			return -1
		case <-time.After(50 * time.Millisecond):
		}
	}
	return -1
}

// waitNewLeader is the default end of a member's crash: it returns once the
// running members have a leader (recorded in the etcd timeline), or at once when
// they cannot elect one.
func (r *run) waitNewLeader() {
	if i := r.waitLeader(); i >= 0 {
		r.event(etcdTimeline, "member %d is leader", i)
	}
}
