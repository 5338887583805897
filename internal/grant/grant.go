// Package grant takes a fence.Grant at an adapter's door as a Checked (read once and
// checked by fence.CheckGrant, or as fence.Exec handed it over), and builds the fence
// errors every adapter returns alike: lost, commit unknown, idle timeout. Every
// adapter, lockclient and lockmetrics use it; fence imports none of it.
package grant

import (
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grantread"
	"github.com/fencegate/fencegate/internal/typednil"
)

// Checked is a grant read once and checked (resources sorted and distinct, token,
// lease, Done, Context); a fence.Grant, Set, Leased and Watched.
type Checked = grantread.Grant[fence.Token]

// Check returns g as a Checked: the grant fence.Exec read and checked, as it is (Exec
// looked at its loss just now); any other grant read once (each method called once)
// and checked by fence.CheckGrant, the one check.
func Check(g fence.Grant) (*Checked, error) {
	if typednil.Is(g) {
		return nil, fence.CheckGrant(g)
	}
	c, fresh := grantread.Read(g)
	if !fresh {
		return c, nil
	}
	if err := fence.CheckGrant(c); err != nil {
		return nil, err
	}
	return c, nil
}

// CheckOne is Check for a write that fences one resource: a fence.Set of several is
// fence.ErrInvalidArgument, rather than fence one of them.
func CheckOne(g fence.Grant) (*Checked, error) {
	c, err := Check(g)
	if err != nil {
		return nil, err
	}
	if c.Multi() {
		return nil, fmt.Errorf("%w: grant %q covers %d resources: a single-resource write fences one; write a grant set's resources in a fenced transaction", fence.ErrInvalidArgument, c.Resource(), len(c.Resources()))
	}
	return c, nil
}

// CheckSingle is CheckOne's check alone.
func CheckSingle(g fence.Grant) error {
	_, err := CheckOne(g)
	return err
}

// DefaultIdleTimeout is the idle bound when neither Store nor grant says.
const DefaultIdleTimeout = grantread.DefaultIdleTimeout

// Lost returns fence.ErrLost for the lock of resource at token, naming them: the cause
// a lock's Context ends with when it is lost.
func Lost(resource string, token fence.Token) error {
	return grantread.LostError(fence.ErrLost, resource, token, nil)
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
