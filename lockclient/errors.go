package lockclient

import (
	"context"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors returned by this package. Match them with errors.Is; the typed errors
// carry the details and match their sentinel. A lost lock is reported with a
// *fence.LostError (errors.Is(err, fence.ErrLost)), and a token <= 0 with a
// *fence.InvalidTokenError (errors.Is(err, fence.ErrInvalidToken)).
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
	// ErrInvalidName means a lock name is empty, too long, not UTF-8, or contains a
	// slash or a control character. It also matches fence.ErrInvalidResource.
	ErrInvalidName = errors.New("lockclient: invalid lock name")
	// ErrInvalidOption means an option to New, Acquire or TryAcquire is unusable.
	ErrInvalidOption = errors.New("lockclient: invalid option")
	// ErrReleased is the cause of a Lock's context after Release.
	ErrReleased = errors.New("lockclient: lock released")
	// ErrInvalidSet means AcquireSet or TryAcquireSet was given no names, a name
	// more than once, or more than MaxSetSize names. A bad name in a set is
	// reported with ErrInvalidName instead.
	ErrInvalidSet = errors.New("lockclient: invalid lock set")
)

// MaxNameLen is the longest lock name, in bytes: a lock name is the resource of
// its grants, so it has fence.MaxResourceLen's limit.
const MaxNameLen = fence.MaxResourceLen

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

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

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

// Is reports whether target is ErrNotHeld.
func (e *NotHeldError) Is(target error) bool { return target == ErrNotHeld }

// nameError matches both ErrInvalidName and fence.ErrInvalidResource: a lock name
// is a resource name with stricter rules.
type nameError struct{ msg string }

func (e *nameError) Error() string { return "lockclient: invalid lock name: " + e.msg }
func (e *nameError) Is(target error) bool {
	return target == ErrInvalidName || target == fence.ErrInvalidResource
}

// CheckName reports why name cannot name a lock, or nil. A name is 1 to MaxNameLen
// bytes of UTF-8 without slashes (the key space under the prefix stays flat, so
// List and the prefix cannot be confused) and without control characters (names
// appear in logs and keys as they are).
func CheckName(name string) error {
	switch {
	case name == "":
		return &nameError{"empty"}
	case len(name) > MaxNameLen:
		return &nameError{fmt.Sprintf("%d bytes, the limit is %d", len(name), MaxNameLen)}
	case !utf8.ValidString(name):
		return &nameError{fmt.Sprintf("%q is not UTF-8", name)}
	}
	for _, r := range name {
		switch {
		case r == '/':
			return &nameError{fmt.Sprintf("%q contains a slash", name)}
		case unicode.IsControl(r):
			return &nameError{fmt.Sprintf("%q contains control character %U", name, r)}
		}
	}
	return nil
}

func checkToken(name string, token fence.Token) error {
	if token <= 0 {
		return &fence.InvalidTokenError{Resource: name, Token: token}
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
