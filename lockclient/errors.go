package lockclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors returned by this package. Match them with errors.Is; the typed errors
// carry the details and match their sentinel. A lost lock is reported with
// fence.ErrLost, naming the lock and its token, and a token <= 0, a bad lock name,
// a bad option or set with an error wrapping fence.ErrInvalidArgument that names
// the problem.
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
	// renewal, or etcd no longer had it: every lock of that session is lost. The
	// cause of each such Lock's context matches it (and fence.ErrLost), as does a
	// TryAcquire whose session was lost during the call. The Client is not: its
	// next Acquire starts a new session.
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

// checkName reports why name cannot name a lock (lockname.Check: a resource name
// without slashes or control characters), or nil; the error wraps
// fence.ErrInvalidArgument.
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

func checkToken(name string, token fence.Token) error {
	if token <= 0 {
		return fmt.Errorf("fence: invalid token %d for %q: tokens are > 0: %w", token, name, fence.ErrInvalidArgument)
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
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal:
		return true
	}
	return false
}
