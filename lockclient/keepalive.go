package lockclient

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxUnanswered is how many keepalives may wait for their answers on one
// stream; when one more is due, the stream is given up and a new one opened.
const maxUnanswered = 2

// errNoAnswer is the keepalive failure reported when a stream is given up.
var errNoAnswer = errors.New("lockclient: keepalive stream gave no answer within two renewal intervals")

// keepalive is a session's own LeaseKeepAlive stream, opened at the first
// renewal and kept for the session's life: one gRPC stream per session rather
// than one per renewal (clientv3's KeepAliveOnce), which is what a process with
// its own connection and lease would have. clientv3's KeepAlive also keeps one
// stream, but hides when each keepalive was sent; here every send time is kept,
// so that the session deadline counts from it. etcd answers the keepalives of
// one stream in order, so the oldest send time belongs to the next answer.
//
// It is used by the session's loop goroutine only, apart from the receiving
// goroutine, which hands answers over on results.
type keepalive struct {
	ctx     context.Context
	c       *Client
	lease   clientv3.LeaseID
	results chan kaResult
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	gen     int         // the current stream's number; answers of earlier ones are dropped
	sent    []time.Time // send times of the unanswered keepalives, oldest first
	leader  leaderView  // see homing.go
	// Streams opened in homeTerm to reach the leader.
	homeTerm uint64
	rehomes  int
}

// kaResult is one answer, or the error that ended stream gen. The first answer
// on a stream also says which member serves it and which one leads.
type kaResult struct {
	gen    int
	ttl    int64
	err    error
	member uint64 // the member that answered; 0 after the first answer
	leader uint64 // the leader's member ID; 0 unknown
	term   uint64 // raft term of the answer
}

func newKeepalive(ctx context.Context, c *Client, lease clientv3.LeaseID) *keepalive {
	return &keepalive{ctx: ctx, c: c, lease: lease, results: make(chan kaResult, 1)}
}

// send sends one keepalive at now, opening a stream if there is none, or a new
// one if too many keepalives went unanswered on this one.
func (k *keepalive) send(now time.Time) error {
	var gaveUp bool
	if len(k.sent) >= maxUnanswered {
		k.reset()
		gaveUp = true
	}
	if k.stream == nil {
		if err := k.open(); err != nil {
			return err
		}
	}
	if err := k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.lease)}); err != nil {
		k.reset()
		return err
	}
	k.sent = append(k.sent, now)
	if gaveUp {
		return errNoAnswer // sent anew, but the last ones failed: say so
	}
	return nil
}

func (k *keepalive) open() error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	st, err := pb.NewLeaseClient(k.c.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return err
	}
	k.gen++
	k.stream, k.cancel = st, cancel
	k.c.loops.Add(1)
	go k.recv(ctx, st, k.gen)
	return nil
}

// recv hands the stream's answers to the loop until the stream ends.
func (k *keepalive) recv(ctx context.Context, st pb.Lease_LeaseKeepAliveClient, gen int) {
	defer k.c.loops.Done()
	for first := true; ; first = false {
		resp, err := st.Recv()
		r := kaResult{gen: gen, err: err}
		if err == nil {
			r.ttl = resp.TTL
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

// answer matches r with the send time of the keepalive it answers. It returns
// false for what no keepalive waits for: the end of a stream given up, an
// answer of another lease.
func (k *keepalive) answer(r kaResult) (sent time.Time, ok bool) {
	if r.gen != k.gen || k.stream == nil {
		return time.Time{}, false
	}
	if len(k.sent) > 0 {
		sent = k.sent[0]
	}
	if r.err != nil {
		k.reset()
		return sent, true
	}
	if len(k.sent) == 0 {
		return sent, false
	}
	k.sent = k.sent[1:]
	return sent, true
}

// waiting returns how many keepalives wait for their answers.
func (k *keepalive) waiting() int { return len(k.sent) }

// reset gives up the stream; the next send opens a new one.
func (k *keepalive) reset() {
	if k.cancel != nil {
		k.cancel()
	}
	k.stream, k.cancel, k.sent = nil, nil, nil
	k.gen++
}
