package keepalive

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// maxRehomes bounds, per raft term, the new streams a session opens to land
// its keepalives on etcd's leader.
const maxRehomes = 5

// A keepalive that reaches a follower costs etcd more than one that reaches
// the leader: the follower forwards each renewal to the leader in an HTTP
// request between members, so its gRPC handling is paid on top of the leader's
// work. A session therefore keeps its stream on the leader where it can. It
// cannot pick the member (clientv3's connection balances each new stream over
// the endpoints), but the first answer on a stream names the member that
// serves it, one Status call over the same connection names the leader, and a
// stream on a follower is replaced by a new one, which the balancer places on
// the next member, a few times at most per term. Only a stream with no
// keepalive waiting for its answer is replaced, so no renewal is lost on the
// way; the session deadline is untouched.

// leaderView is what a session knows of etcd's leader; the receiving
// goroutines of its streams share it.
type leaderView struct {
	mu   sync.Mutex
	id   uint64 // member ID; 0 unknown
	term uint64
}

// leaderFor returns the leader's member ID as of raft term, or 0 when it
// cannot be learnt: one Status call when term is newer than what is known.
func (k *Stream) leaderFor(ctx context.Context, term uint64) uint64 {
	v := &k.leader
	v.mu.Lock()
	if v.id != 0 && term <= v.term {
		defer v.mu.Unlock()
		return v.id
	}
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	resp, err := pb.NewMaintenanceClient(k.conn).Status(ctx, &pb.StatusRequest{})
	if err != nil || resp.RaftTerm < term {
		return 0 // no answer, or from a member behind: stay where the stream is
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if resp.RaftTerm >= v.term {
		v.id, v.term = resp.Leader, resp.RaftTerm
	}
	return v.id
}

// Rehome reports whether the stream that gave r, the first answer on it,
// should be replaced (Reset, then Send) by one that may land on the leader.
func (k *Stream) Rehome(r Result) bool {
	if r.leader == 0 || r.member == r.leader || len(k.sent) > 0 {
		return false
	}
	if r.term > k.homeTerm {
		k.homeTerm, k.rehomes = r.term, 0
	}
	if k.rehomes >= maxRehomes {
		return false
	}
	k.rehomes++
	return true
}
