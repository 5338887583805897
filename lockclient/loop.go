package lockclient

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/fencegate/fencegate/lockclient/internal/keepalive"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sessionLoop is the state of one session's goroutine. It renews the session
// lease on the session's keepalive stream at the cadence the Client's need sets
// (see renewal), recording each keepalive's send time, so that the deadline
// counts from it; it declares the
// session lost when the deadline passes without a confirmed renewal, expires
// manual-renewal locks that were not renewed in time, and retries pending
// deletes. The stream's answers arrive from a receiving goroutine and a delete
// batch runs in a short-lived goroutine of its own (at most one at a time), so a
// slow etcd delays no deadline. The loop ends with its session or the Client.
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

// step does what is due at now and returns when to look again; false when the
// session is over.
func (s *sessionLoop) step(now time.Time) (time.Time, bool) {
	c := s.c
	c.mu.Lock()
	if c.state != live || c.lease != s.lease {
		c.mu.Unlock()
		return now, false
	}
	deadline := c.deadline
	if !now.Before(deadline) {
		c.mu.Unlock()
		c.loseLease(s.lease, "no renewal confirmed before the session deadline")
		return now, false
	}
	expired := c.expireManualLocked(now)
	var todo []pendingDelete
	if !s.deleting && len(c.pending) > 0 && !now.Before(s.nextDelete) {
		todo = slices.Clone(c.pending)
		s.batch = len(todo)
	}
	busy := len(c.locks) > 0
	wake := deadline
	if len(c.manual) > 0 && c.manual[0].deadline.Before(wake) {
		wake = c.manual[0].deadline
	}
	c.mu.Unlock()

	for _, l := range expired {
		l.lose(ErrNotRenewed)
	}
	if !now.Before(s.renew.Next(busy)) {
		s.send(now, deadline)
	}
	if todo != nil {
		s.deleting = true
		c.loops.Add(1)
		go func() {
			defer c.loops.Done()
			s.delc <- c.deleteBatch(s.ctx, todo, deadline)
		}()
	}
	if next := s.renew.Next(busy); next.Before(wake) {
		wake = next
	}
	if !s.deleting && todo == nil && !s.nextDelete.IsZero() && s.nextDelete.Before(wake) {
		wake = s.nextDelete
	}
	return wake, true
}

// send sends a keepalive and records it, or, if none could be sent, schedules a
// retry.
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

// wait blocks until timer fires or something happens; false when the loop must
// end.
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

// answered handles what the keepalive stream returned; false when the session is
// lost.
func (s *sessionLoop) answered(r keepalive.Result) bool {
	c := s.c
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
		if s.ka.Rehome(r) {
			s.ka.Reset()
			s.send(now, deadline) // on a new stream, which may land on the leader
		}
	}
	return true
}
