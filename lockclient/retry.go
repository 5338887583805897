package lockclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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

// retryAcquire decides what a failed attempt means: nil to try again (at once
// under a new session, or after a pause for a transient error while waiting),
// or the error to return. A lease etcd no longer has ends the session at once.
func (c *Client) retryAcquire(ctx context.Context, err error, r *request, lease clientv3.LeaseID) error {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		c.loseLease(lease, "etcd no longer has the session lease")
		if r.wait {
			return nil
		}
		return fmt.Errorf("%w: lease not found while acquiring %s", ErrSessionLost, label(r.names, r.set))
	case transient(ctx, err) && r.wait:
		return c.sleep(ctx, retryDelay)
	}
	return fmt.Errorf("lockclient: acquire %s: %w", label(r.names, r.set), c.explain(ctx, err))
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

// retryCampaign reports whether a failed campaign should be tried again, after
// a pause that doubles up to a second; it logs the failure.
func (c *Client) retryCampaign(ctx context.Context, name string, err error, backoff *time.Duration) bool {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, fence.ErrInvalidArgument) ||
		errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) {
		return false
	}
	c.campaignFailed(name, err)
	if c.sleep(ctx, *backoff) != nil {
		return false
	}
	*backoff = min(2**backoff, time.Second)
	return true
}
