package lockclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors returned by this package, to match with errors.Is; each typed error
// matches its sentinel. A lost lock is reported with fence.ErrLost, and bad
// input (name, token, option, set) with fence.ErrInvalidArgument.
var (
	// ErrHeld means TryAcquire (or TryAcquireSet) found the lock held; *HeldError
	// names the holder.
	ErrHeld = errors.New("lockclient: lock held")
	// ErrNotHeld means a release or renewal named a lock that does not carry the
	// given token any more (it expired, was released, or passed to a successor).
	ErrNotHeld = errors.New("lockclient: lock not held")
	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("lockclient: client closed")
	// ErrSessionLost means a Client's session lease ran out without a confirmed
	// renewal, or etcd no longer had it: the cause of each of its Locks' contexts
	// matches it (and fence.ErrLost). The Client's next Acquire starts a new one.
	ErrSessionLost = errors.New("lockclient: session lost")
	// ErrNotRenewed means a lock taken WithManualRenewal was not renewed within
	// its lease: the cause of its Lock's context matches it and fence.ErrLost.
	ErrNotRenewed = errors.New("lockclient: lock not renewed within its lease")
	// ErrReleased is the cause of a Lock's context after Release.
	ErrReleased = errors.New("lockclient: lock released")
)

// HeldError is returned by TryAcquire when another holder (possibly in this same
// Client) has the lock. It matches ErrHeld.
type HeldError struct {
	Name   string
	Holder Info        // who holds it; LeaseLeft is zero (TryAcquire spends no second round trip)
	Token  fence.Token // the holder's token
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lockclient: lock %q held by %q (host %q, pid %d) with token %d",
		e.Name, e.Holder.ClientID, e.Holder.Host, e.Holder.PID, e.Token)
}

// Unwrap returns ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// NotHeldError is returned when a release names a token the lock's key no longer
// carries. It matches ErrNotHeld.
type NotHeldError struct {
	Name    string
	Token   fence.Token // the token presented
	Current fence.Token // the token the key carries now; 0 when nobody holds it
}

func (e *NotHeldError) Error() string {
	if e.Current > 0 {
		return fmt.Sprintf("lockclient: lock %q not held with token %d: token %d holds it now", e.Name, e.Token, e.Current)
	}
	return fmt.Sprintf("lockclient: lock %q not held with token %d: nobody holds it", e.Name, e.Token)
}

// Unwrap returns ErrNotHeld.
func (e *NotHeldError) Unwrap() error { return ErrNotHeld }

// errNilLock is the error of a method called on a nil *Lock.
var errNilLock = fmt.Errorf("%w: nil *Lock", ErrNotHeld)

// TermError is what Lead returns when fn returned an error while its term was
// still held. It matches fn's error, never fence.ErrLost: a lost term does not
// end Lead.
type TermError struct {
	Name  string
	Token fence.Token // the term in which fn failed
	Err   error       // what fn returned
}

func (e *TermError) Error() string {
	return fmt.Sprintf("lockclient: lead %q: term %d: %v", e.Name, e.Token, e.Err)
}

// Unwrap returns fn's error.
func (e *TermError) Unwrap() error { return e.Err }

// checkName reports why name cannot name a lock (lockname.Check), or nil; the
// error wraps fence.ErrInvalidArgument.
func checkName(name string) error {
	if err := lockname.Check(name); err != nil {
		return fmt.Errorf("lockclient: %w", err)
	}
	return nil
}

// invalid returns an error wrapping fence.ErrInvalidArgument that says what
// argument or option is unusable and why.
func invalid(format string, args ...any) error {
	return fmt.Errorf("lockclient: "+format+": %w", append(args, fence.ErrInvalidArgument)...)
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

// regrantBackoff is the first window of the jittered backoff before a new
// session after a lost one, doubling per loss in a row up to half the TTL, so
// that many Clients that lose their sessions together come back spread out.
const regrantBackoff = 500 * time.Millisecond

// backoffLocked pushes the next grant back by a random part of a window that
// doubles with each loss in a row.
func (c *Client) backoffLocked() {
	c.failures++
	window := min(c.ttl/2, regrantBackoff<<min(c.failures-1, 16))
	c.notBefore = time.Now().Add(rand.N(window))
}

// endedErr is the error for an operation on an ended lock.
func (l *Lock) endedErr() error {
	cause := context.Cause(l.ctx)
	if errors.Is(cause, ErrReleased) {
		return &NotHeldError{Name: l.name, Token: l.token}
	}
	return cause
}

// closedErr is the error for a wait cut short by Close.
func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return stateErr(c.state)
}

// stateErr is the error for a client that has no session to grant locks under.
func stateErr(s state) error {
	if s == closed {
		return ErrClosed
	}
	return ErrSessionLost
}
