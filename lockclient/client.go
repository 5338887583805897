package lockclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Client takes named locks in etcd under one session lease at a time. It is
// safe for concurrent use; a process normally has one for its whole life. It
// is not reentrant: a second Acquire of a name it holds waits for the first to
// be released, as another Client's would.
type Client struct {
	options
	cli         *clientv3.Client
	seq         atomic.Uint64 // makes every put's value unique, to recognise our own after an unknown outcome
	valuePrefix []byte        // see valuePrefix

	sess *session
	reg  *registry

	stop  chan struct{}  // closed by Close
	loops sync.WaitGroup // every goroutine of the Client (spawn); Close waits for them
	done  chan struct{}  // closed by Close

	closing  context.Context         // cancelled (cause ErrClosed) by Close first: every call derives from it (call)
	closeNow context.CancelCauseFunc // cancels closing
}

// New returns a Client that takes locks through cli. It does no I/O: the
// session lease is granted by the first acquire, under that call's context. It
// returns an error wrapping fence.ErrInvalidArgument for a nil cli or an
// unusable option, naming the option.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, invalid("New: nil etcd client")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	reg := newRegistry()
	c := &Client{options: o, cli: cli, sess: newSession(o.ttl, reg), reg: reg,
		stop: make(chan struct{}), done: make(chan struct{})}
	c.closing, c.closeNow = context.WithCancelCause(context.Background())
	host, _ := os.Hostname()
	pid := os.Getpid()
	var b [8]byte
	rand.Read(b[:])
	instance := hex.EncodeToString(b[:])
	if c.id == "" {
		c.id = fmt.Sprintf("%s-%d-%s", host, pid, instance[:12])
	}
	c.valuePrefix = valuePrefix(host, pid, c.id, instance)
	return c, nil
}

// ID returns the client ID stored with every lock this Client takes.
func (c *Client) ID() string { return c.id }

func (c *Client) key(name string) string { return c.prefix + name }

// Close releases every lock the Client holds, deleting their keys in one Txn
// conditioned on their tokens (watchers see them released), revokes its
// session lease (a second etcd write) and ends its goroutines; every held Lock
// ends with cause ErrClosed and every later call returns ErrClosed. Every call
// in flight (a wait, a Lead, a Watch, whose channel closes) ends with ErrClosed
// as soon as its etcd request is cancelled, without waiting on etcd; no
// goroutine of the Client outlives Close. Close is idempotent. If etcd cannot
// be reached within the TTL, Close returns that error; the lease expires by
// itself.
func (c *Client) Close() error {
	c.closeNow(ErrClosed)
	prev, lease, dels, locks, ok := c.sess.close()
	if !ok {
		return nil
	}
	for _, l := range locks {
		l.end(ErrClosed)
		for _, key := range l.keys {
			dels = append(dels, tokenDelete(key, l.token))
		}
	}
	close(c.stop)
	c.loops.Wait()
	close(c.done)
	if prev != live {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	if len(dels) > 0 {
		c.deleteBatch(ctx, uniqueKeys(dels), time.Now().Add(c.ttl)) // if it fails, the revoke deletes them
	}
	if _, err := c.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("lockclient: close: revoke session lease (it expires within %v by itself): %w", c.ttl, err)
	}
	return nil
}

// uniqueKeys keeps the first delete of each key: etcd refuses a Txn that
// names a key twice.
func uniqueKeys(dels []pendingDelete) []pendingDelete {
	seen := make(map[string]bool, len(dels))
	return slices.DeleteFunc(dels, func(p pendingDelete) bool {
		dup := seen[p.key]
		seen[p.key] = true
		return dup
	})
}

// call derives the context of one public call from ctx and the Client's
// closing context, so that Close cancels every wait and etcd request in flight
// at once. end, deferred with the call's error (or nil), releases the context
// and turns the error of a call that Close cut short into ErrClosed.
func (c *Client) call(ctx context.Context) (context.Context, func(err *error)) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func(err *error) {
		stop()
		if err != nil {
			*err = closedErr(ctx, *err)
		}
		cancel(context.Canceled)
	}
}

// closedErr is err, or ErrClosed when err is ctx's end (or etcd's answer to
// it) and Close ended ctx.
func closedErr(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrClosed) || !errors.Is(context.Cause(ctx), ErrClosed) {
		return err
	}
	if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return ErrClosed
	}
	return err
}

// spawn runs f on a goroutine counted in c.loops, which Close waits for;
// false, running nothing, once the Client is closed.
func (c *Client) spawn(f func()) bool {
	return c.sess.ifOpen(func() {
		c.loops.Add(1)
		go func() {
			defer c.loops.Done()
			f()
		}()
	})
}

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

// endedErr is the error for an operation on a lock no longer registered. It
// waits for the lock's end: whoever unregisters a lock ends it at once, but a
// call that finds it gone may run in between, and must not report it held.
func (l *Lock) endedErr() error {
	<-l.ctx.Done()
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
