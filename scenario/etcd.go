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

// etcdView is what the running members say when asked in turn: the leader's
// index (-1: none named), its term, whether every running member named it at
// that term (settled), and the first running member that follows it (-1: none).
type etcdView struct {
	leader, follower int
	term             uint64
	settled          bool
}

// role is member i's part in v, for the etcd timeline.
func (v etcdView) role(i int) string {
	switch {
	case v.leader == i:
		return fmt.Sprintf("leader, term %d", v.term)
	case v.leader >= 0:
		return fmt.Sprintf("follower; member %d leads, term %d", v.leader, v.term)
	}
	return "no leader"
}

// view asks every running member for its status, each within a second.
func (r *run) view() etcdView {
	v := etcdView{leader: -1, follower: -1, settled: true}
	ids := map[uint64]int{} // member ID -> index, of those that answered
	var leader uint64
	var answered []int
	for i, ep := range r.endpoints {
		if r.isDown(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := r.etcd.Status(ctx, ep)
		cancel()
		if err != nil || st.Leader == 0 || leader != 0 && (st.Leader != leader || st.RaftTerm != v.term) {
			v.settled = false
		}
		if err == nil && st.Leader != 0 {
			ids[st.Header.MemberId], leader, v.term = i, st.Leader, st.RaftTerm
			answered = append(answered, i)
		}
	}
	if i, ok := ids[leader]; ok {
		v.leader = i
	}
	v.settled = v.settled && v.leader >= 0
	for _, i := range answered {
		if i != v.leader {
			v.follower = i
			break
		}
	}
	return v
}

// leads reports whether member i says it is leader (false when it cannot say).
func (r *run) leads(i int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := r.etcd.Status(ctx, r.endpoints[i])
	return err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId
}

func (r *run) isDown(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[i]
}

// waitView returns the first view that meets ok, or the last one asked when a
// majority is down, the run is closed or leaderTimeout has passed.
func (r *run) waitView(ok func(etcdView) bool) etcdView {
	deadline := time.Now().Add(leaderTimeout)
	for {
		v := r.view()
		if ok(v) || !r.majorityUp() || !time.Now().Before(deadline) {
			return v
		}
		select {
		case <-r.closed:
			return v
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// crashMember kills member i, v being the cluster as the step found it (the
// etcd timeline says i's role and who led), and returns the undo that restarts
// it. A crash that would leave no majority until an Until point is refused: no
// worker could take or release a lock meanwhile, so the point might never come.
func (r *run) crashMember(i int, v etcdView, s *Step) (func(), error) {
	r.mu.Lock()
	if r.down[i] {
		r.mu.Unlock()
		return nil, fmt.Errorf("etcd member %d is down already: an earlier crash has not restarted it yet (its Until point)", i)
	}
	r.down[i] = true
	r.mu.Unlock()
	if s.until != nil && !r.majorityUp() {
		r.mu.Lock()
		r.down[i] = false
		r.mu.Unlock()
		return nil, fmt.Errorf("it would leave etcd without a majority until %s, and no worker can take or release a lock meanwhile: leave out Until (the member restarts once the others have a leader), or set Config.EtcdMembers to 3 or 5", s.until)
	}
	r.cluster.Stop(i)
	at := time.Now()
	r.event(etcdTimeline, "member %d (%s) killed", i, v.role(i))
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

// waitNewLeader is the default end of a member's crash: it returns once the
// running members have a leader (recorded in the etcd timeline), or at once when
// they cannot elect one.
func (r *run) waitNewLeader() {
	if v := r.waitView(func(v etcdView) bool { return v.leader >= 0 }); v.leader >= 0 {
		r.event(etcdTimeline, "member %d is leader, term %d", v.leader, v.term)
	}
}
