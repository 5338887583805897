package lockclient

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/fencegate/fencegate/lockclient/internal/keepalive"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sessionLoop is one session's goroutine: it renews the lease and retries
// pending deletes. Answers and delete batches come from other goroutines, and
// deadlines are the session's clock (expire), so a slow etcd delays no loss.
type sessionLoop struct {
	c          *Client
	lease      clientv3.LeaseID
	ended      <-chan struct{} // closed when the session is lost
	ctx        context.Context // cancelled when the loop returns
	ka         *keepalive.Stream
	delc       chan error // a delete batch's result
	deleting   bool
	batch      int // pending deletes in flight
	renew      *keepalive.Cadence
	nextDelete time.Time
}

// loop runs the session lease granted by a request sent at granted.
func (c *Client) loop(lease clientv3.LeaseID, ended <-chan struct{}, granted time.Time) {
	defer c.loops.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sessionLoop{
		c: c, lease: lease, ended: ended, ctx: ctx,
		ka:    keepalive.New(ctx, c.cli.ActiveConnection(), lease, &c.loops, c.interval),
		delc:  make(chan error, 1),
		renew: keepalive.NewCadence(c.ttl, c.interval, c.idle, granted),
	}
	defer s.ka.Reset()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wake, ok := s.step(time.Now())
		if !ok {
			return
		}
		timer.Reset(time.Until(wake))
		if !s.wait(timer) {
			return
		}
	}
}

// step does each job that is due at now (the next keepalive, a batch of
// pending deletes) and returns when the next one is due; false: the session
// ended. Deadlines are no job of the loop: the session's clock (expire).
func (s *sessionLoop) step(now time.Time) (time.Time, bool) {
	c := s.c
	c.mu.Lock()
	if c.state != live || c.lease != s.lease {
		c.mu.Unlock()
		return now, false
	}
	deadline, busy := c.deadline, len(c.locks) > 0
	todo := s.takeDeletesLocked(now)
	c.mu.Unlock()

	renewDue := s.renewIfDue(now, busy, deadline)
	deleteDue := s.startDeletes(todo, deadline)
	return earliest(now.Add(c.ttl), renewDue, deleteDue), true
}

// takeDeletesLocked returns the pending deletes to send now, if no batch is in
// flight and the pause after a failed one has passed.
func (s *sessionLoop) takeDeletesLocked(now time.Time) []pendingDelete {
	c := s.c
	if s.deleting || len(c.pending) == 0 || now.Before(s.nextDelete) {
		return nil
	}
	s.batch = len(c.pending)
	return slices.Clone(c.pending)
}

// renewIfDue sends a keepalive if one is due and returns when the next is.
func (s *sessionLoop) renewIfDue(now time.Time, busy bool, deadline time.Time) time.Time {
	if !now.Before(s.renew.Next(busy)) {
		s.send(now, deadline)
	}
	return s.renew.Next(busy)
}

// startDeletes sends todo as a batch on a goroutine of its own (its answer
// comes on delc) and returns when a failed batch is to be tried again; zero
// when nothing waits for a time.
func (s *sessionLoop) startDeletes(todo []pendingDelete, deadline time.Time) time.Time {
	c := s.c
	if todo == nil {
		if s.deleting {
			return time.Time{}
		}
		return s.nextDelete
	}
	s.deleting = true
	c.loops.Add(1)
	go func() {
		defer c.loops.Done()
		s.delc <- c.deleteBatch(s.ctx, todo, deadline)
	}()
	return time.Time{}
}

// earliest returns the earliest of ts that is not zero.
func earliest(ts ...time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}

// send sends a keepalive and records it, or, if none could be sent, a retry.
func (s *sessionLoop) send(now, deadline time.Time) {
	err := s.ka.Send(now)
	if err != nil {
		s.c.keptAlive(s.lease, 0, deadline, err)
	}
	if err != nil && !errors.Is(err, keepalive.ErrNoAnswer) {
		s.renew.Failed(now) // not sent
		return
	}
	s.renew.Sent(now)
}

// wait blocks until timer fires or something happens; false: the loop ends.
func (s *sessionLoop) wait(timer *time.Timer) bool {
	c := s.c
	select {
	case <-c.stop:
		return false
	case <-s.ended:
		return false
	case <-c.poke:
	case <-timer.C:
	case r := <-s.ka.Results():
		return s.answered(r)
	case err := <-s.delc:
		s.deleting = false
		if err != nil {
			s.nextDelete = time.Now().Add(retryDelay)
			break
		}
		s.nextDelete = time.Time{}
		c.mu.Lock()
		if len(c.pending) >= s.batch {
			c.pending = append(c.pending[:0:0], c.pending[s.batch:]...)
		}
		c.mu.Unlock()
	}
	return true
}

// answered handles what the keepalive stream returned; false: session lost.
func (s *sessionLoop) answered(r keepalive.Result) bool {
	c := s.c
	if r.Hint() {
		if s.ka.Rehome(r) {
			c.mu.Lock()
			deadline := c.deadline
			c.mu.Unlock()
			s.ka.Reset()
			s.send(time.Now(), deadline) // on a new stream, which may land on the leader
		}
		return true
	}
	sent, ok := s.ka.Answer(r)
	if !ok {
		return true // from a stream given up, or an answer nothing waited for
	}
	now := time.Now()
	var rtt time.Duration
	if !sent.IsZero() {
		rtt = now.Sub(sent)
	}
	switch {
	case r.Err != nil:
		c.mu.Lock()
		deadline := c.deadline
		c.mu.Unlock()
		c.keptAlive(s.lease, rtt, deadline, r.Err)
		s.renew.Failed(now)
	case r.TTL <= 0:
		// etcd no longer has the lease: it expired there.
		c.loseLease(s.lease, "etcd no longer has the session lease")
		return false
	default:
		c.mu.Lock()
		if d := sent.Add(time.Duration(r.TTL) * time.Second); d.After(c.deadline) {
			c.deadline = d
		}
		deadline := c.deadline
		c.failures = 0 // a renewed session ends the backoff
		c.mu.Unlock()
		c.keptAlive(s.lease, rtt, deadline, nil)
		s.renew.Confirmed(rtt, s.ka.Waiting() == 0)
	}
	return true
}

// pendingDelete is a conditional delete retried until etcd answers it: a
// release lost in transit, an expired manual lock, an attempt of unknown outcome.
type pendingDelete struct {
	key string
	cmp clientv3.Cmp
}

// maxDeletesPerTxn keeps a batch under etcd's default 128 operations per Txn.
const maxDeletesPerTxn = 64

func (c *Client) addPending(p pendingDelete) {
	c.mu.Lock()
	if c.state != live {
		c.mu.Unlock()
		return // no session: the lease its key was under is gone or going, and the key with it
	}
	c.pending = append(c.pending, p)
	c.mu.Unlock()
	c.wake()
}

// deleteBatch sends the deletes, each conditioned on its own compare, as nested
// Txns: one etcd write per batch however many locks expired together.
func (c *Client) deleteBatch(ctx context.Context, todo []pendingDelete, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for len(todo) > 0 {
		n := min(len(todo), maxDeletesPerTxn)
		ops := make([]clientv3.Op, n)
		for i, p := range todo[:n] {
			ops[i] = clientv3.OpTxn([]clientv3.Cmp{p.cmp}, []clientv3.Op{clientv3.OpDelete(p.key)}, nil)
		}
		if _, err := c.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
		todo = todo[n:]
	}
	return nil
}
