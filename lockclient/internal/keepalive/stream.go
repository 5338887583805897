// Package keepalive renews one etcd lease on one long-lived LeaseKeepAlive
// stream for a lock client's session: it sends keepalives, matches answers to
// their send times, says when the next one is due (Cadence) and keeps the
// stream on etcd's leader where it can. It knows nothing of locks.
package keepalive

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// maxUnanswered is how many keepalives may wait for their answers on one
// stream; when one more is due, the stream is given up and a new one opened.
const maxUnanswered = 2

// ErrNoAnswer is the keepalive failure Send reports when it gave a stream up.
var ErrNoAnswer = errors.New("lockclient: keepalive stream gave no answer within two renewal intervals")

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
