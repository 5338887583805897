// Package grantread reads a grant once: every method a fenced write needs (Resource,
// Token, and Resources, Lease, Done, Context where the grant has them) is called
// once, and a Grant keeps what they returned. fence checks a Grant's values
// (fence.CheckGrant) and hands it to the Store as the grant it presents; the adapters
// take it as it is (internal/grant.Check) instead of asking the caller's grant again.
//
// It imports only the standard library, so fence may use it. Grant is generic over
// the token type (fence.Token) for that reason: internal/grant names the instance.
package grantread

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Source is what Read reads: fence.Grant's method set, over the token type T.
type Source[T ~int64] interface {
	Resource() string
	Token() T
}

// Grant is a grant as read once: a fence.Grant, Set, Leased and Watched whose methods
// return what the grant's returned then, with a Context like *lockclient.Lock's.
type Grant[T ~int64] struct {
	resource  string
	resources []string // sorted, distinct: a Set's own (possibly none), else the resource
	token     T
	lease     time.Duration   // 0: the grant is not Leased
	done      <-chan struct{} // nil: the grant is not Watched
	ctx       context.Context // nil: the grant has no Context
	checked   bool            // fence.CheckGrant passed it
}

// Read returns g read once, and fresh: false when g is a Grant already read and
// checked (returned as it is), true for a Grant still to be checked. g must not be
// nil (a typed nil included): a caller checks that first.
func Read[T ~int64](g Source[T]) (c *Grant[T], fresh bool) {
	if c, ok := g.(*Grant[T]); ok {
		return c, !c.checked
	}
	c = &Grant[T]{resource: g.Resource(), token: g.Token()}
	if s, ok := g.(interface{ Resources() []string }); ok {
		c.resources = slices.Compact(slices.Sorted(slices.Values(s.Resources())))
	} else {
		c.resources = []string{c.resource}
	}
	if l, ok := g.(interface{ Lease() time.Duration }); ok {
		c.lease = l.Lease()
	}
	if w, ok := g.(interface{ Done() <-chan struct{} }); ok {
		c.done = w.Done()
	}
	if x, ok := g.(interface{ Context() context.Context }); ok {
		c.ctx = x.Context()
	}
	return c, true
}

// MarkChecked records that fence.CheckGrant passed c; only fence calls it.
func (c *Grant[T]) MarkChecked() { c.checked = true }

func (c *Grant[T]) Resource() string      { return c.resource }
func (c *Grant[T]) Token() T              { return c.token }
func (c *Grant[T]) Resources() []string   { return c.resources }
func (c *Grant[T]) Lease() time.Duration  { return c.lease }
func (c *Grant[T]) Done() <-chan struct{} { return c.done }

// Context is the grant's own Context when it had one (cancelled, with its cause, when
// the lock ends), else context.Background().
func (c *Grant[T]) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// Multi reports whether c fences more than one resource (a *lockclient.Lock on one
// name, though a fence.Set, does not).
func (c *Grant[T]) Multi() bool { return len(c.resources) > 1 }

// DefaultIdleTimeout is the idle bound when neither Store nor grant says: the lock
// service's default lease.
const DefaultIdleTimeout = 10 * time.Second

// IdleTimeout is c's idle bound: override when > 0, else c's lease when > 0, else
// DefaultIdleTimeout; at least a millisecond, the servers' unit.
func (c *Grant[T]) IdleTimeout(override time.Duration) time.Duration {
	d := cmp.Or(max(override, 0), max(c.lease, 0), DefaultIdleTimeout)
	return max(d, time.Millisecond)
}

// Lost returns lost (fence.ErrLost) for c when its Done channel has closed, else nil.
func (c *Grant[T]) Lost(lost error) error {
	if c.done == nil {
		return nil
	}
	select {
	case <-c.done:
		return LostError(lost, c.resource, c.token, c.ctx)
	default:
		return nil
	}
}

// LostError is lost (fence.ErrLost) for the lock of resource at token, naming them and
// why it ended: ctx's cause (lockclient's ErrReleased or ErrClosed) wrapped, or the
// cause itself when it already is a lost error (the lock's own, saying why). ctx may
// be nil; a bare context.Canceled says nothing and is left out.
func LostError[T ~int64](lost error, resource string, token T, ctx context.Context) error {
	var cause error
	if ctx != nil {
		cause = context.Cause(ctx)
	}
	switch {
	case cause == nil, cause == context.Canceled:
		return fmt.Errorf("%w: %q at token %d", lost, resource, token)
	case errors.Is(cause, lost):
		return cause
	}
	return fmt.Errorf("%w: %q at token %d: %w", lost, resource, token, cause)
}
