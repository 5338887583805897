package lockclient

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/lockclient/internal/keepalive"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// session returns the live session lease, granting one if there is none, once
// the backoff after a loss has passed. ctx governs the wait and the grant.
func (c *Client) session(ctx context.Context) (clientv3.LeaseID, error) {
	for {
		c.mu.Lock()
		st, id := c.state, c.lease
		c.mu.Unlock()
		switch st {
		case live:
			return id, nil
		case closed:
			return 0, ErrClosed
		}
		select {
		case c.grantSem <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.done:
			continue
		}
		err := c.grant(ctx)
		<-c.grantSem
		if err != nil {
			return 0, err
		}
	}
}

func (c *Client) grant(ctx context.Context) error {
	c.mu.Lock()
	st, wait := c.state, time.Until(c.notBefore)
	c.mu.Unlock()
	if st != idle {
		return nil // granted (or closed) while this caller waited
	}
	if wait > 0 {
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
	if err := c.connected(ctx); err != nil {
		return fmt.Errorf("lockclient: grant session lease: no connection to etcd: %w", c.explain(ctx, err))
	}
	sent := time.Now()
	resp, err := retryOverload(ctx, c, "grant", func() (*clientv3.LeaseGrantResponse, error) {
		return c.cli.Grant(ctx, int64(c.ttl/time.Second))
	})
	if err != nil {
		if ctx.Err() == nil {
			c.mu.Lock()
			c.backoffLocked()
			c.mu.Unlock()
		}
		return fmt.Errorf("lockclient: grant session lease: %w", c.explain(ctx, err))
	}
	c.mu.Lock()
	if c.state != idle { // closed meanwhile
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		c.cli.Revoke(rctx, resp.ID)
		return ErrClosed
	}
	c.state = live
	c.lease = resp.ID
	c.deadline = sent.Add(time.Duration(resp.TTL) * time.Second)
	c.expiry = time.AfterFunc(time.Until(c.deadline), func() { c.expire(resp.ID) })
	ended := make(chan struct{})
	c.ended = ended
	c.loops.Add(1)
	c.mu.Unlock()
	go c.loop(resp.ID, ended, sent)
	c.sessionStarted(resp.ID)
	return nil
}

// connected waits until the etcd client's connection is up, so that a grant's
// send time, from which the session deadline counts, is not spent dialing.
func (c *Client) connected(ctx context.Context) error {
	conn := c.cli.ActiveConnection()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		if st == connectivity.Idle {
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, st) {
			return ctx.Err()
		}
	}
	return nil
}

// expire is the session's clock, a timer of its own: it declares the session
// lost once its deadline has passed without a confirmed renewal. No etcd call
// stands between the deadline and the loss.
func (c *Client) expire(lease clientv3.LeaseID) {
	c.mu.Lock()
	if c.state != live || c.lease != lease {
		c.mu.Unlock()
		return
	}
	if left := time.Until(c.deadline); left > 0 { // renewed meanwhile
		c.expiry.Reset(left)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.loseLease(lease, "no renewal confirmed before the session deadline")
}

// loseLease ends session lease if it is still the Client's: every lock of it
// ends (fence.ErrLost and ErrSessionLost), and the next Acquire starts a new
// session after the backoff. The lease is not revoked: etcd expires it.
func (c *Client) loseLease(lease clientv3.LeaseID, why string) {
	c.mu.Lock()
	if c.state != live || c.lease != lease {
		c.mu.Unlock()
		return
	}
	c.state = idle
	c.lease = 0
	c.expiry.Stop()
	close(c.ended)
	c.backoffLocked()
	locks := c.takeLocksLocked()
	c.mu.Unlock()
	for _, l := range locks {
		l.end(fmt.Errorf("%w: %w", grant.Lost(l.name, l.token), ErrSessionLost))
	}
	c.sessionLost(lease, why, len(locks))
}

// expireManualLocked ends the manual-renewal locks whose deadline passed and
// queues their keys' deletes; the caller ends them once c.mu is released.
func (c *Client) expireManualLocked(now time.Time) []*Lock {
	var expired []*Lock
	for len(c.manual) > 0 && !now.Before(c.manual[0].deadline) {
		l := heap.Pop(&c.manual).(*Lock)
		delete(c.locks, l.name)
		expired = append(expired, l)
		key := c.key(l.name)
		c.pending = append(c.pending, pendingDelete{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", int64(l.token))})
	}
	return expired
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

// sessionLoop is one session's goroutine: it renews the lease, declares the
// session lost past its deadline, expires manual-renewal locks and retries
// pending deletes. Answers and delete batches come from other goroutines, so a
// slow etcd delays no deadline.
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

// step does what is due at now and returns when to look again; false: the end.
func (s *sessionLoop) step(now time.Time) (time.Time, bool) {
	c := s.c
	c.mu.Lock()
	if c.state != live || c.lease != s.lease {
		c.mu.Unlock()
		return now, false
	}
	deadline := c.deadline // passing it is expire's job
	expired := c.expireManualLocked(now)
	var todo []pendingDelete
	if !s.deleting && len(c.pending) > 0 && !now.Before(s.nextDelete) {
		todo = slices.Clone(c.pending)
		s.batch = len(todo)
	}
	busy := len(c.locks) > 0
	wake := now.Add(c.ttl) // or sooner, below
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
