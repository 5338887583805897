// Package keepalive renews a lock client's session lease on one long-lived
// LeaseKeepAlive stream, kept on etcd's leader where it can, and says when the
// next keepalive is due (Cadence). It knows nothing of locks.
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

// maxUnanswered keepalives may wait on one stream; one more due replaces it.
const maxUnanswered = 2

// ErrNoAnswer means Send gave a stream up, its keepalives unanswered, and
// sent the keepalive anew on a new stream.
var ErrNoAnswer = errors.New("keepalive: stream gave no answer within two renewal intervals")

// Stream is a session's own LeaseKeepAlive stream, kept for the session's
// life. Unlike clientv3's KeepAlive it keeps every send time, so the session
// deadline counts from it: etcd answers a stream's keepalives in order, so the
// oldest send time belongs to the next answer. Only the session's loop uses
// it; the receiving goroutine hands answers over on Results.
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
	leader  leaderView
	// Streams opened in homeTerm to reach the leader.
	homeTerm uint64
	rehomes  int
}

// Result is one answer, or the error that ended stream gen, or a hint after a
// stream's first answer saying which member serves it and which one leads.
type Result struct {
	gen    int
	TTL    int64 // the lease's TTL in seconds; <= 0: etcd no longer has it
	Err    error
	member uint64 // the member that answered; 0 after the first answer
	leader uint64 // the leader's member ID; 0 unknown
	term   uint64 // raft term of the answer
	hint   bool   // only member, leader and term are set
}

// New returns lease's stream over conn, sending nothing before Send. Its
// receiving goroutines count on loops; timeout bounds each Status call.
func New(ctx context.Context, conn grpc.ClientConnInterface, lease clientv3.LeaseID, loops *sync.WaitGroup, timeout time.Duration) *Stream {
	return &Stream{ctx: ctx, conn: conn, loops: loops, timeout: timeout, lease: lease, results: make(chan Result, 1)}
}

// Results delivers the stream's answers and errors.
func (k *Stream) Results() <-chan Result { return k.results }

// Send sends one keepalive at now, opening a stream if there is none, or a new
// one if too many keepalives went unanswered on this one.
func (k *Stream) Send(now time.Time) error {
	gaveUp := len(k.sent) >= maxUnanswered
	if gaveUp {
		k.Reset()
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

// errOpen means no stream could be opened within the bound.
var errOpen = errors.New("keepalive: no stream opened within a renewal interval")

// open opens a stream, giving up after k.timeout: while etcd cannot be reached
// the loop must stay free to expire manual locks and try again.
func (k *Stream) open() error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	bound := time.AfterFunc(k.timeout, cancel)
	st, err := pb.NewLeaseClient(k.conn).LeaseKeepAlive(ctx)
	if !bound.Stop() && err == nil {
		err = errOpen
	}
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

// recv hands the stream's answers to the loop until the stream ends. The
// first answer goes at once; which member leads is looked up beside it and
// handed over after it (a hint), so no Status call delays a renewal.
func (k *Stream) recv(ctx context.Context, st pb.Lease_LeaseKeepAliveClient, gen int) {
	defer k.loops.Done()
	for first := true; ; first = false {
		resp, err := st.Recv()
		r := Result{gen: gen, Err: err}
		if err == nil {
			r.TTL = resp.TTL
		}
		if !k.deliver(ctx, r) || err != nil {
			return
		}
		if h := resp.GetHeader(); first && h != nil && resp.TTL > 0 {
			k.loops.Add(1)
			go func() {
				defer k.loops.Done()
				k.deliver(ctx, Result{gen: gen, hint: true, member: h.MemberId, term: h.RaftTerm, leader: k.leaderFor(ctx, h.RaftTerm)})
			}()
		}
	}
}

func (k *Stream) deliver(ctx context.Context, r Result) bool {
	select {
	case k.results <- r:
		return true
	case <-ctx.Done():
		return false
	}
}

// Hint reports whether r only says which member serves the stream and which
// one leads, for Rehome; it answers no keepalive.
func (r Result) Hint() bool { return r.hint }

// Answer matches r with the send time of the keepalive it answers; false for
// what no keepalive waits for (the end of a stream given up).
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
// its keepalives on etcd's leader (a follower forwards each one to it); the
// balancer of clientv3 places each new stream on the next member.
const maxRehomes = 5

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

// Rehome reports whether the stream that gave hint r should be replaced
// (Reset, then Send) by one that may land on the leader.
func (k *Stream) Rehome(r Result) bool {
	if r.gen != k.gen || k.stream == nil || r.leader == 0 || r.member == r.leader || len(k.sent) > 0 {
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

// slowAnswer is the share of the TTL (one part in slowAnswer) that an answer
// may take before an idle session renews as often as a busy one.
const slowAnswer = 10

// Cadence tells when a session's next keepalive is due, from its latest one
// and whether the Client holds a lock (docs/design.md, "The session"). An idle
// session survives a failed renewal too: every expiry costs etcd a commit.
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

// Next returns when the next keepalive is due; busy: the client holds a lock.
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

// Failed schedules a retry soon: no keepalive could be sent, or the stream broke.
func (r *Cadence) Failed(now time.Time) {
	r.retryAt = now.Add(min(retryDelay, r.interval))
}

// Confirmed records an answer that took rtt; latest: it answered the latest keepalive.
func (r *Cadence) Confirmed(rtt time.Duration, latest bool) {
	r.answered = latest
	r.slow = rtt > r.ttl/slowAnswer
	r.early = rand.Float64()
}
