package lockclient

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
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
	// ErrMaxHold means a lock taken WithMaxHold reached its max hold: the cause
	// of its Lock's context matches it and fence.ErrLost.
	ErrMaxHold = errors.New("lockclient: lock held for its max hold")
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

// endedErr is the error for an operation on an ended lock.
func (l *Lock) endedErr() error {
	cause := context.Cause(l.ctx)
	if errors.Is(cause, ErrReleased) {
		return &NotHeldError{Name: l.name, Token: l.token}
	}
	return cause
}

// stateErr is the error for a client that has no session to grant locks under.
func stateErr(s state) error {
	if s == closed {
		return ErrClosed
	}
	return ErrSessionLost
}

// checkSet returns names sorted in a new slice, or why they cannot form a set.
func checkSet(names []string) ([]string, error) {
	switch {
	case len(names) == 0:
		return nil, invalid("lock set: no names")
	case len(names) > maxSetSize:
		return nil, invalid("lock set: %d names, the limit is %d (etcd's default --max-txn-ops)", len(names), maxSetSize)
	}
	for _, n := range names {
		if err := checkName(n); err != nil {
			return nil, err
		}
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, invalid("lock set: %q listed more than once", sorted[i])
		}
	}
	return sorted, nil
}

// label names a lock in errors: its name, or for a set its first names and size.
func label(names []string, set bool) string {
	switch {
	case !set:
		return fmt.Sprintf("%q", names[0])
	case len(names) <= 3:
		return fmt.Sprintf("set %q", names)
	}
	return fmt.Sprintf("set %q... of %d names", names[:3], len(names))
}
