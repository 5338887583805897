package scenario

import "fmt"

// KillEtcdLeader kills the etcd member that is leader when the step acts
// (SIGKILL, no leadership transfer); the others elect a new one if a majority
// remains. The member restarts on its data at its Until point or, by default,
// once a new leader is elected (at once when none can be: a one-member cluster).
// Until is refused where the crash leaves no majority: no worker could take or
// release a lock before the point.
func KillEtcdLeader() *Step { return &Step{fault: killEtcdLeader{}} }

// CrashEtcd kills etcd member i (0 to Config.EtcdMembers-1), whatever its role
// when the step acts (the etcd timeline says it), and restarts it as
// KillEtcdLeader does its member. CrashEtcdFollower picks a follower instead.
func CrashEtcd(i int) *Step { return &Step{fault: crashEtcd{i}} }

// CrashEtcdFollower kills a member that is a follower when the step acts, once
// every running member names the same leader at the same term, and restarts it
// as CrashEtcd does; the leader keeps leading. The etcd timeline names the
// member and the leader. A one-member cluster has no follower: refused.
func CrashEtcdFollower() *Step { return &Step{fault: crashFollower{}} }

// checkEtcd says why the run's etcd cannot be broken, or "".
func checkEtcd(cfg Config, verb string) string {
	if len(cfg.EtcdEndpoints) > 0 {
		return fmt.Sprintf("%s: Config.EtcdEndpoints names an etcd the kit did not start, so it cannot crash its members: leave EtcdEndpoints empty and set Config.EtcdMembers to have the kit start one", verb)
	}
	return ""
}

type killEtcdLeader struct{}

func (killEtcdLeader) String() string { return "KillEtcdLeader()" }

func (f killEtcdLeader) check(cfg Config, _ map[string]bool, _ *Step) string {
	return checkEtcd(cfg, "KillEtcdLeader")
}

func (killEtcdLeader) act(r *run, s *Step) (func(), error) {
	v := r.waitView(func(v etcdView) bool { return v.settled })
	if !v.settled {
		return nil, fmt.Errorf("etcd has no leader to kill: a majority of its members is down (end an earlier crash with Until first)")
	}
	return r.crashMember(v.leader, v, s)
}

func (killEtcdLeader) end(r *run) { r.waitNewLeader() }

type crashEtcd struct{ member int }

func (f crashEtcd) String() string { return fmt.Sprintf("CrashEtcd(%d)", f.member) }

func (f crashEtcd) check(cfg Config, _ map[string]bool, _ *Step) string {
	if msg := checkEtcd(cfg, "CrashEtcd"); msg != "" {
		return msg
	}
	if n := cfg.members(); f.member < 0 || f.member >= n {
		return fmt.Sprintf("the run's etcd has %d member(s), numbered 0 to %d: crash one of those, or set Config.EtcdMembers (1, 3 or 5) to have more", n, n-1)
	}
	return ""
}

func (f crashEtcd) act(r *run, s *Step) (func(), error) {
	return r.crashMember(f.member, r.view(), s)
}

func (crashEtcd) end(r *run) { r.waitNewLeader() }

type crashFollower struct{}

func (crashFollower) String() string { return "CrashEtcdFollower()" }

func (crashFollower) check(cfg Config, _ map[string]bool, _ *Step) string {
	if msg := checkEtcd(cfg, "CrashEtcdFollower"); msg != "" {
		return msg
	}
	if cfg.members() == 1 {
		return "the run's etcd has one member, the leader, and no follower: set Config.EtcdMembers to 3 or 5"
	}
	return ""
}

// act picks the first running follower of a settled leader, and kills it once
// its own answer, right before the kill, says it still follows.
func (crashFollower) act(r *run, s *Step) (func(), error) {
	for {
		v := r.waitView(func(v etcdView) bool { return v.settled && v.follower >= 0 })
		if !v.settled {
			return nil, fmt.Errorf("etcd has no settled leader with a running follower: a majority of its members is down, or an earlier crash has not restarted its member")
		}
		if !r.leads(v.follower) {
			return r.crashMember(v.follower, v, s)
		}
	}
}

func (crashFollower) end(r *run) { r.waitNewLeader() }
