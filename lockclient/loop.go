package lockclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient/internal/keepalive"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	deadline, ok := c.sess.live(s.lease)
	if !ok {
		return now, false
	}
	busy := c.reg.busy()
	var todo []pendingDelete
	if !s.deleting && !now.Before(s.nextDelete) {
		todo = c.sess.pendingBatch()
		s.batch = len(todo)
	}

	renewDue := s.renewIfDue(now, busy, deadline)
	deleteDue := s.startDeletes(todo, deadline)
	return earliest(now.Add(c.ttl), renewDue, deleteDue), true
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
	case <-c.sess.woken():
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
		c.sess.deleted(s.batch)
	}
	return true
}

// answered handles what the keepalive stream returned; false: session lost.
func (s *sessionLoop) answered(r keepalive.Result) bool {
	c := s.c
	if r.Hint() {
		if s.ka.Rehome(r) {
			_, _, deadline := c.sess.current()
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
		_, _, deadline := c.sess.current()
		c.keptAlive(s.lease, rtt, deadline, r.Err)
		s.renew.Failed(now)
	case r.TTL <= 0:
		// etcd no longer has the lease: it expired there.
		c.loseLease(s.lease, "etcd no longer has the session lease")
		return false
	default:
		deadline := c.sess.renewed(sent.Add(time.Duration(r.TTL) * time.Second)) // and ends the backoff
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

// tokenDelete deletes key if it still carries token.
func tokenDelete(key string, token fence.Token) pendingDelete {
	return pendingDelete{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))}
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

// transient reports whether err may go away by itself (no leader, leader
// changed, a member unreachable), so that waiting callers retry instead of failing.
// Such an error leaves a write's outcome unknown.
func transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	code := status.Code(err)
	return code == codes.Unavailable || code == codes.Internal
}

// maxOverloadPause bounds the pause between tries of an overloaded request.
const maxOverloadPause = time.Second

// retryOverload runs call until etcd does not refuse it as overloaded ("too
// many requests", sent before proposing: nothing was written), ctx ends or the
// Client closes; between tries it pauses a random while within a window that
// doubles from retryDelay up to maxOverloadPause, and reports each retry.
func retryOverload[T any](ctx context.Context, c *Client, op string, call func() (T, error)) (T, error) {
	for n := 0; ; n++ {
		v, err := call()
		if err == nil || !errors.Is(err, rpctypes.ErrTooManyRequests) || ctx.Err() != nil {
			return v, err
		}
		c.retried(op, err)
		window := min(retryDelay<<min(n, 8), maxOverloadPause)
		if err := c.sleep(ctx, window/2+rand.N(window/2)); err != nil {
			return v, err
		}
	}
}

// retryTransient runs call until it succeeds, fails for good or ctx ends,
// pausing retryDelay after each transient error.
func retryTransient[T any](ctx context.Context, c *Client, call func() (T, error)) (T, error) {
	for {
		v, err := call()
		if err == nil || !transient(ctx, err) {
			return v, err
		}
		if err := c.sleep(ctx, retryDelay); err != nil {
			var zero T
			return zero, err
		}
	}
}

// errNoAnswer is the cause of a call's bound (bounded).
var errNoAnswer = errors.New("lockclient: etcd did not answer within the bound")

// bounded bounds a call by the session TTL: every call but the waits (Acquire,
// AcquireSet, Lead, whose only bound is their ctx) gives up after it when etcd
// does not answer, with an error matching context.DeadlineExceeded (explain).
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, c.ttl, errNoAnswer)
}

// explain explains an etcd call's error: the bound of bounded that ended it,
// or etcd's permission error, which names no key: with auth enabled, the
// user's role lacks readwrite on the Client's prefix (the result still
// matches rpctypes.ErrPermissionDenied).
func (c *Client) explain(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errNoAnswer) {
		return fmt.Errorf("etcd did not answer within %v (the session TTL): %w", c.ttl, context.DeadlineExceeded)
	}
	if errors.Is(err, rpctypes.ErrPermissionDenied) {
		return fmt.Errorf("etcd user may not read and write keys under %q (grant its role readwrite on that prefix): %w", c.prefix, err)
	}
	return err
}

// retryDelay spaces retries after a transient etcd error (no leader, a member
// down), so a waiting Acquire does not spin while the cluster elects.
const retryDelay = 100 * time.Millisecond

// sleep waits d, or returns ctx's error or the Client's (closed, session lost).
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.sess.err()
	}
}
