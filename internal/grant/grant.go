// Package grant checks a fence.Grant once at an adapter's door and reads it into a
// Checked (resources sorted and distinct, token, lease, Done), and builds the fence
// errors every adapter returns alike: lost, commit unknown, idle timeout. Every
// adapter, lockclient and lockmetrics use it; fence imports none of it.
package grant

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// Checked is a grant checked and read once at an adapter's door (resources sorted and
// distinct, token, lease, Done); a fence.Grant, Set, Leased and Watched.
type Checked struct {
	resource  string
	resources []string // sorted, distinct
	token     fence.Token
	lease     time.Duration   // 0: the grant is not fence.Leased
	done      <-chan struct{} // nil: the grant is not fence.Watched
}

// Check is fence.CheckGrant, then the normalized grant; a *Checked is returned as is.
func Check(g fence.Grant) (*Checked, error) {
	if c, ok := g.(*Checked); ok && c != nil {
		return c, nil
	}
	if err := fence.CheckGrant(g); err != nil {
		return nil, err
	}
	c := &Checked{resource: g.Resource(), resources: fence.Resources(g), token: g.Token()}
	if l, ok := g.(fence.Leased); ok {
		c.lease = l.Lease()
	}
	if w, ok := g.(fence.Watched); ok {
		c.done = w.Done()
	}
	return c, nil
}

func (c *Checked) Resource() string      { return c.resource }
func (c *Checked) Token() fence.Token    { return c.token }
func (c *Checked) Resources() []string   { return c.resources }
func (c *Checked) Lease() time.Duration  { return c.lease }
func (c *Checked) Done() <-chan struct{} { return c.done }

// CheckOne is Check for a write that fences one resource: a fence.Set of several is
// fence.ErrInvalidArgument, rather than fence one of them.
func CheckOne(g fence.Grant) (*Checked, error) {
	c, err := Check(g)
	if err != nil {
		return nil, err
	}
	if len(c.resources) > 1 {
		return nil, fmt.Errorf("%w: grant %q covers %d resources: a single-resource write fences one; write a grant set's resources in a fenced transaction", fence.ErrInvalidArgument, g.Resource(), len(c.resources))
	}
	return c, nil
}

// CheckSingle is CheckOne's check alone.
func CheckSingle(g fence.Grant) error {
	_, err := CheckOne(g)
	return err
}

// DefaultIdleTimeout is the idle bound when neither Store nor grant says: the lock
// service's default lease.
const DefaultIdleTimeout = 10 * time.Second

// IdleTimeout is c's idle bound: override when > 0, else c's lease when > 0, else
// DefaultIdleTimeout; at least a millisecond, the servers' unit.
func (c *Checked) IdleTimeout(override time.Duration) time.Duration {
	d := cmp.Or(max(override, 0), max(c.lease, 0), DefaultIdleTimeout)
	return max(d, time.Millisecond)
}

// Multi reports whether c fences more than one resource (a *lockclient.Lock on one
// name, though a fence.Set, does not).
func (c *Checked) Multi() bool { return len(c.resources) > 1 }

// Lost returns fence.ErrLost for the lock of resource at token, naming them.
func Lost(resource string, token fence.Token) error {
	return fmt.Errorf("%w: %q at token %d", fence.ErrLost, resource, token)
}

// CommitUnknown returns fence.ErrCommitUnknown for op under g, whose reply was lost,
// wrapping the driver's err.
func CommitUnknown(g fence.Grant, op string, err error) error {
	if err == nil {
		return fmt.Errorf("%w: %s for %q at token %d", fence.ErrCommitUnknown, op, g.Resource(), g.Token())
	}
	return fmt.Errorf("%w: %s for %q at token %d: %w", fence.ErrCommitUnknown, op, g.Resource(), g.Token(), err)
}

// IdleTimeoutErr returns fence.ErrIdleTimeout for g, wrapping err.
func IdleTimeoutErr(g fence.Grant, err error) error {
	return fmt.Errorf("%w: fence %q at token %d: %w", fence.ErrIdleTimeout, g.Resource(), g.Token(), err)
}

// WriteResult labels a fenced write's error for metrics and logs: "accepted" (nil),
// "stale", "lost", "commit_unknown" (the fence errors) or "error".
func WriteResult(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case errors.Is(err, fence.ErrStale):
		return "stale"
	case errors.Is(err, fence.ErrLost):
		return "lost"
	case errors.Is(err, fence.ErrCommitUnknown):
		return "commit_unknown"
	}
	return "error"
}
