// Package keepalive renews one etcd lease on one long-lived LeaseKeepAlive
// stream for a lock client's session: it sends keepalives, matches answers to
// their send times, says when the next one is due (Cadence) and keeps the
// stream on etcd's leader where it can. It knows nothing of locks.
package keepalive

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// maxUnanswered is how many keepalives may wait for their answers on one
// stream; when one more is due, the stream is given up and a new one opened.
const maxUnanswered = 2

// Errors reported by Send.
var (
	// ErrNoAnswer means Send gave a stream up: the keepalives on it went
	// unanswered; the keepalive was sent anew on a new stream.
	ErrNoAnswer = errors.New("keepalive: stream gave no answer within two renewal intervals")
)

// Stream is a session's own LeaseKeepAlive stream, opened at the first
// renewal and kept for the session's life: one gRPC stream per session rather
// than one per renewal (clientv3's KeepAliveOnce), which is what a process with
// its own connection and lease would have. clientv3's KeepAlive also keeps one
// stream, but hides when each keepalive was sent; here every send time is kept,
// so that the session deadline counts from it. etcd answers the keepalives of
// one stream in order, so the oldest send time belongs to the next answer.
//
// It is used by the session's loop goroutine only, apart from the receiving
// goroutine, which hands answers over on Results.
type Stream struct {
	ctx     context.Context
	conn    grpc.ClientConnInterface
	loops   *sync.WaitGroup // counts the receiving goroutines
	timeout time.Duration   // for the Status call that names the leader
	lease   clientv3.LeaseID
	results chan Result
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	gen     int         // the current stream's number; answers of earlier ones are dropped
	sent    []time.Time // send times of the unanswered keepalives, oldest first
	leader  leaderView  // see homing.go
	// Streams opened in homeTerm to reach the leader.
	homeTerm uint64
	rehomes  int
}

// Result is one answer, or the error that ended stream gen. The first answer
// on a stream also says which member serves it and which one leads.
type Result struct {
	gen    int
	TTL    int64 // the lease's TTL in seconds; <= 0: etcd no longer has it
	Err    error
	member uint64 // the member that answered; 0 after the first answer
	leader uint64 // the leader's member ID; 0 unknown
	term   uint64 // raft term of the answer
}

// New returns the stream of lease over conn; nothing is sent before Send.
// Its receiving goroutines are counted on loops and end with ctx or Reset;
// timeout bounds the Status call that names etcd's leader.
func New(ctx context.Context, conn grpc.ClientConnInterface, lease clientv3.LeaseID, loops *sync.WaitGroup, timeout time.Duration) *Stream {
	return &Stream{ctx: ctx, conn: conn, loops: loops, timeout: timeout, lease: lease, results: make(chan Result, 1)}
}

// Results delivers the stream's answers and errors.
func (k *Stream) Results() <-chan Result { return k.results }

// Send sends one keepalive at now, opening a stream if there is none, or a new
// one if too many keepalives went unanswered on this one.
func (k *Stream) Send(now time.Time) error {
	var gaveUp bool
	if len(k.sent) >= maxUnanswered {
		k.Reset()
		gaveUp = true
	}
	if k.stream == nil {
		if err := k.open(); err != nil {
			return err
		}
	}
	if err := k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.lease)}); err != nil {
		k.Reset()
		return err
	}
	k.sent = append(k.sent, now)
	if gaveUp {
		return ErrNoAnswer // sent anew, but the last ones failed: say so
	}
	return nil
}

func (k *Stream) open() error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	st, err := pb.NewLeaseClient(k.conn).LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return err
	}
	k.gen++
	k.stream, k.cancel = st, cancel
	k.loops.Add(1)
	go k.recv(ctx, st, k.gen)
	return nil
}

// recv hands the stream's answers to the loop until the stream ends.
func (k *Stream) recv(ctx context.Context, st pb.Lease_LeaseKeepAliveClient, gen int) {
	defer k.loops.Done()
	for first := true; ; first = false {
		resp, err := st.Recv()
		r := Result{gen: gen, Err: err}
		if err == nil {
			r.TTL = resp.TTL
			if h := resp.GetHeader(); first && h != nil && resp.TTL > 0 {
				r.member, r.term = h.MemberId, h.RaftTerm
				r.leader = k.leaderFor(ctx, h.RaftTerm)
			}
		}
		select {
		case k.results <- r:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Answer matches r with the send time of the keepalive it answers. It returns
// false for what no keepalive waits for: the end of a stream given up, an
// answer of another lease.
func (k *Stream) Answer(r Result) (sent time.Time, ok bool) {
	if r.gen != k.gen || k.stream == nil {
		return time.Time{}, false
	}
	if len(k.sent) > 0 {
		sent = k.sent[0]
	}
	if r.Err != nil {
		k.Reset()
		return sent, true
	}
	if len(k.sent) == 0 {
		return sent, false
	}
	k.sent = k.sent[1:]
	return sent, true
}

// Waiting returns how many keepalives wait for their answers.
func (k *Stream) Waiting() int { return len(k.sent) }

// Reset gives up the stream; the next Send opens a new one.
func (k *Stream) Reset() {
	if k.cancel != nil {
		k.cancel()
	}
	k.stream, k.cancel, k.sent = nil, nil, nil
	k.gen++
}

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

// slowAnswer is the share of the TTL (one part in slowAnswer) that a keepalive's
// answer may take before the session counts etcd as slow: an idle session then
// renews as often as a busy one, because a late idle renewal leaves less time
// for slow answers than a busy one does.
const slowAnswer = 10

// Cadence is what a session's loop knows of its renewals: when the latest
// keepalive went out, whether etcd confirmed it, and how long etcd took. From it
// and whether the Client holds a lock, next tells when the next keepalive is due.
//
// The cadence is by need. A session that holds a lock renews every interval
// (TTL/3 by default), so that a renewal or two may fail before its deadline
// passes. A session that holds none renews every idle interval (TTL/2 by
// default), and when a keepalive goes unanswered it tries again half the gap
// between that interval and the TTL later (a quarter TTL), so an idle session
// too survives a failed renewal; losing it would lose no lock, but every expiry costs etcd a
// synchronous commit. A session that becomes busy renews at once if its latest
// keepalive went out more than an interval ago, so a lock taken on a session
// renewed long ago starts with the tolerance of a busy one.
type Cadence struct {
	ttl      time.Duration
	interval time.Duration // while a lock is held
	idle     time.Duration // while none is
	last     time.Time     // send time of the latest keepalive; the grant's at first
	answered bool          // etcd confirmed the latest keepalive
	slow     bool          // the latest answer took longer than TTL/slowAnswer
	early    float64       // in [0, 1): the next renewal comes early by this share of a tenth of its interval
	retryAt  time.Time     // not zero: a send failed or the stream broke, try again then
}

// retryDelay spaces a new send after one that failed.
const retryDelay = 100 * time.Millisecond

// NewCadence returns the cadence of a session with the given TTL and renewal
// intervals whose lease was granted by a request sent at granted.
func NewCadence(ttl, interval, idle time.Duration, granted time.Time) *Cadence {
	return &Cadence{ttl: ttl, interval: interval, idle: idle, last: granted, answered: true, early: rand.Float64()}
}

// Restore sets what the cadence knows, without jitter: the latest keepalive
// went out at last, and etcd answered it (slowly) or not.
func (r *Cadence) Restore(last time.Time, answered, slow bool) {
	r.last, r.answered, r.slow, r.early, r.retryAt = last, answered, slow, 0, time.Time{}
}

// Next returns when the next keepalive is due; busy is whether the client
// holds a lock.
func (r *Cadence) Next(busy bool) time.Time {
	if !r.retryAt.IsZero() {
		return r.retryAt
	}
	busy = busy || r.slow
	if !r.answered {
		// The latest keepalive is unanswered: one more on the same stream (etcd
		// answers a stream's keepalives in order, so a late answer still counts).
		if busy {
			return r.last.Add(r.interval)
		}
		return r.last.Add(min(r.interval, (r.ttl-r.idle)/2))
	}
	every := r.idle
	if busy {
		every = r.interval
	}
	// Up to a tenth early, at random: Clients whose sessions started together
	// (after an outage, say) drift apart instead of renewing in bursts forever.
	// Earlier is always safe.
	return r.last.Add(every - time.Duration(r.early*float64(every/10)))
}

// Sent records a keepalive sent at now.
func (r *Cadence) Sent(now time.Time) {
	r.last, r.answered, r.retryAt = now, false, time.Time{}
}

// Failed schedules a retry soon: no keepalive could be sent, or the stream
// broke.
func (r *Cadence) Failed(now time.Time) {
	r.retryAt = now.Add(min(retryDelay, r.interval))
}

// Confirmed records an answer that took rtt; latest is whether it answered the
// latest keepalive (none is still waiting for its answer).
func (r *Cadence) Confirmed(rtt time.Duration, latest bool) {
	r.answered = latest
	r.slow = rtt > r.ttl/slowAnswer
	r.early = rand.Float64()
}
