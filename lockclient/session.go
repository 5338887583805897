package lockclient

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate/fence"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is the Client's session lease: its state, its local deadline and
// the clock that ends it there, the backoff before a new one after a loss,
// and the deletes to retry under it. It empties the registry when it ends
// (lock order: session, then registry).
type session struct {
	ttl      time.Duration
	reg      *registry
	grantSem chan struct{} // one grant at a time
	poke     chan struct{} // wakes the loop: an earlier manual deadline, a new pending delete

	mu        sync.Mutex
	state     state
	lease     clientv3.LeaseID
	granted   time.Duration    // the TTL etcd granted the lease; 0 before the first
	deadline  time.Time        // conservative deadline: renewal send time + TTL returned
	expiry    *time.Timer      // fires at the deadline: the session's own clock (Client.expire)
	ended     chan struct{}    // closed when the live session is lost
	failures  int              // sessions lost or grants failed since one was last renewed
	notBefore time.Time        // no new session before this: the backoff after a loss
	pending   []pendingDelete  // deletes to retry until they reach etcd
	marked    clientv3.LeaseID // the lease whose key (sessionKey) etcd stored
}

type state int

const (
	idle   state = iota // no session lease: granted by the next acquire
	live                // session lease granted and renewed
	closed              // Close called
)

func newSession(ttl time.Duration, reg *registry) *session {
	return &session{ttl: ttl, reg: reg, grantSem: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
}

// current returns the session's state, lease and deadline.
func (s *session) current() (state, clientv3.LeaseID, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.lease, s.deadline
}

// live returns the deadline of lease; false when lease is not the live one.
func (s *session) live(lease clientv3.LeaseID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline, s.state == live && s.lease == lease
}

// isClosed reports whether Close was called.
func (s *session) isClosed() bool {
	st, _, _ := s.current()
	return st == closed
}

// err is the error of a call cut short by the session's end or Close.
func (s *session) err() error {
	st, _, _ := s.current()
	return stateErr(st)
}

// grantedTTL returns the TTL etcd granted the lease; 0 before the first.
func (s *session) grantedTTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.granted
}

// ifOpen runs f, under the session's lock, unless Close was called.
func (s *session) ifOpen(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == closed {
		return false
	}
	f()
	return true
}

// grantable returns the state and how long the backoff still holds a grant back.
func (s *session) grantable() (state, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, time.Until(s.notBefore)
}

// start makes lease, granted for ttl by a request sent at sent, the live
// session, running expire at its deadline and run under the lock; false, with
// nothing done, when Close was called meanwhile.
func (s *session) start(lease clientv3.LeaseID, ttl time.Duration, sent time.Time, expire, run func()) (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != idle {
		return nil, false
	}
	s.state, s.lease, s.granted = live, lease, ttl
	s.deadline = sent.Add(ttl)
	s.expiry = time.AfterFunc(time.Until(s.deadline), expire)
	s.ended = make(chan struct{})
	s.reg.open(lease)
	run()
	return s.ended, true
}

// lose ends lease if it is the live session, with the backoff before the
// next, and returns the locks it held; false if it was not live.
func (s *session) lose(lease clientv3.LeaseID) ([]*Lock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != live || s.lease != lease {
		return nil, false
	}
	s.state, s.lease = idle, 0
	s.expiry.Stop()
	close(s.ended)
	s.failedLocked()
	s.pending = nil
	return s.reg.take(false), true
}

// close ends the session for good: the state it was in, its lease, the
// deletes still pending and the locks it held; false when closed already.
func (s *session) close() (state, clientv3.LeaseID, []pendingDelete, []*Lock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, lease, dels := s.state, s.lease, s.pending
	if prev == closed {
		return prev, 0, nil, nil, false
	}
	s.state = closed
	if prev == live {
		s.expiry.Stop()
	}
	s.pending = nil
	return prev, lease, dels, s.reg.take(true), true
}

// tick is the clock's work at now under lease: the manual-renewal locks whose
// deadline passed (unregistered, their deletes queued) and whether the
// session's deadline passed; if not, the clock is set again.
func (s *session) tick(lease clientv3.LeaseID, now time.Time) ([]*Lock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != live || s.lease != lease {
		return nil, false
	}
	expired := s.reg.expire(now)
	for _, l := range expired {
		s.pending = append(s.pending, tokenDelete(l.keys[0], l.token))
	}
	past := !now.Before(s.deadline)
	if !past {
		s.armLocked()
	}
	return expired, past
}

// arm sets the clock of lease, if it is live, to its next deadline.
func (s *session) arm(lease clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == live && s.lease == lease {
		s.armLocked()
	}
}

// armLocked sets the clock to the next deadline: the session's, or a
// manual-renewal lock's if sooner. Deadlines that move later need no call:
// the clock looks again when it fires.
func (s *session) armLocked() {
	next := s.deadline
	if m := s.reg.next(); !m.IsZero() && m.Before(next) {
		next = m
	}
	s.expiry.Reset(time.Until(next))
}

// renewed records a confirmed renewal: the deadline moves to d if later, and
// the backoff ends. It returns the deadline.
func (s *session) renewed(d time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.After(s.deadline) {
		s.deadline = d
	}
	s.failures = 0
	return s.deadline
}

// regrantBackoff is the first window of the jittered backoff before a new
// session after a lost one, doubling per loss in a row up to half the TTL, so
// that many Clients that lose their sessions together come back spread out.
const regrantBackoff = 500 * time.Millisecond

// failed pushes the next grant back by a random part of a window that doubles
// with each loss in a row.
func (s *session) failed() {
	s.mu.Lock()
	s.failedLocked()
	s.mu.Unlock()
}

func (s *session) failedLocked() {
	s.failures++
	window := min(s.ttl/2, regrantBackoff<<min(s.failures-1, 16))
	s.notBefore = time.Now().Add(rand.N(window))
}

// addPending queues deletes for the loop, unless there is no session: the
// lease their keys were under is gone or going, and the keys with it.
func (s *session) addPending(ps ...pendingDelete) {
	s.mu.Lock()
	if s.state != live || len(ps) == 0 {
		s.mu.Unlock()
		return
	}
	s.pending = append(s.pending, ps...)
	s.mu.Unlock()
	s.wake()
}

// pendingBatch returns the deletes pending now, in a new slice.
func (s *session) pendingBatch() []pendingDelete {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	return slices.Clone(s.pending)
}

// deleted drops the first n pending deletes, which reached etcd.
func (s *session) deleted(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= n {
		s.pending = append(s.pending[:0:0], s.pending[n:]...)
	}
}

// marks reports whether a grant under lease is to store the session key with
// it: the session's first grant does.
func (s *session) marks(lease clientv3.LeaseID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marked != lease
}

// markStored records that etcd stored lease's session key.
func (s *session) markStored(lease clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == lease {
		s.marked = lease
	}
}

// woken is where wake's signal arrives, for the loop.
func (s *session) woken() <-chan struct{} { return s.poke }

func (s *session) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// session returns the live session lease, granting one if there is none, once
// the backoff after a loss has passed. ctx governs the wait and the grant.
func (c *Client) session(ctx context.Context) (clientv3.LeaseID, error) {
	for {
		st, id, _ := c.sess.current()
		switch st {
		case live:
			return id, nil
		case closed:
			return 0, ErrClosed
		}
		select {
		case c.sess.grantSem <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.done:
			continue
		}
		err := c.grant(ctx)
		<-c.sess.grantSem
		if err != nil {
			return 0, err
		}
	}
}

func (c *Client) grant(ctx context.Context) error {
	st, wait := c.sess.grantable()
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
			c.sess.failed()
		}
		return fmt.Errorf("lockclient: grant session lease: %w", c.explain(ctx, err))
	}
	ttl := time.Duration(resp.TTL) * time.Second
	ended, ok := c.sess.start(resp.ID, ttl, sent, func() { c.expire(resp.ID) }, func() { c.loops.Add(1) })
	if !ok { // closed meanwhile
		rctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		c.cli.Revoke(rctx, resp.ID)
		return ErrClosed
	}
	go c.loop(resp.ID, ended, sent)
	c.sessionStarted(resp.ID, ttl)
	return nil
}

// pendDeletes queues a delete of each of keys, conditioned on token.
func (c *Client) pendDeletes(keys []string, token fence.Token) {
	for _, key := range keys {
		c.sess.addPending(tokenDelete(key, token))
	}
}
