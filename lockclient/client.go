package lockclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type state int

const (
	idle   state = iota // no session lease: granted by the next acquire
	live                // session lease granted and renewed
	closed              // Close called
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

	grantSem chan struct{}  // one session grant at a time
	stop     chan struct{}  // closed by Close
	poke     chan struct{}  // wakes the loop: an earlier manual deadline, a new pending delete
	loops    sync.WaitGroup // every goroutine of the Client (spawn); Close waits for them
	done     chan struct{}  // closed by Close

	closing  context.Context         // cancelled (cause ErrClosed) by Close first: every call derives from it (call)
	closeNow context.CancelCauseFunc // cancels closing

	mu        sync.Mutex
	state     state
	lease     clientv3.LeaseID
	deadline  time.Time        // conservative session deadline: renewal send time + TTL returned
	expiry    *time.Timer      // fires at the deadline: the session's own clock (expire)
	ended     chan struct{}    // closed when the live session is lost
	failures  int              // sessions lost or grants failed since a session was last renewed
	notBefore time.Time        // no new session before this: the backoff after a loss
	locks     map[string]*Lock // held locks by name
	manual    lockHeap         // manual-renewal locks by deadline
	pending   []pendingDelete  // deletes to retry until they reach etcd
	marked    clientv3.LeaseID // the session lease whose key (sessionKey) etcd stored
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
	c := &Client{
		options:  o,
		cli:      cli,
		grantSem: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		poke:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		locks:    make(map[string]*Lock),
	}
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
	c.mu.Lock()
	if c.state == closed {
		c.mu.Unlock()
		return nil
	}
	prev, lease := c.state, c.lease
	c.state = closed
	if prev == live {
		c.expiry.Stop()
	}
	dels := c.pending
	locks := c.takeLocksLocked()
	c.mu.Unlock()

	for _, l := range locks {
		l.end(ErrClosed)
		for _, key := range l.keys {
			dels = append(dels, pendingDelete{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", int64(l.token))})
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

// takeLocksLocked empties the client's lock registry and returns what it held.
func (c *Client) takeLocksLocked() []*Lock {
	locks := make([]*Lock, 0, len(c.locks))
	for _, l := range c.locks {
		locks = append(locks, l)
	}
	clear(c.locks)
	c.manual = nil
	c.pending = nil
	return locks
}

// Defaults for New.
const (
	// defaultTTL is the session lease's time to live.
	defaultTTL = 10 * time.Second
	// defaultPrefix is the key prefix under which lock keys live.
	defaultPrefix = "/fencegate/locks/"
	// MinTTL is the shortest session TTL and lock lease this package accepts:
	// etcd silently raises a lease under 1.5 x its election timeout (2 s by
	// default). Deadlines count from the TTL etcd returns, so a cluster with a
	// longer election timeout keeps them right.
	MinTTL = 2 * time.Second
)

// Option configures a Client. An unusable option makes New fail with an error
// wrapping fence.ErrInvalidArgument that names the option.
type Option func(*options) error

type options struct {
	ttl      time.Duration
	interval time.Duration // renewal interval while a lock is held
	idle     time.Duration // renewal interval while none is
	prefix   string
	id       string       // WithIdentity
	log      *slog.Logger // nil: silent
	obs      Observer     // nil: nothing reported
}

// WithTTL sets the session lease's time to live (default 10 s): how long after
// its last confirmed renewal a silent (crashed, frozen, cut off) client keeps
// its locks. It must be whole seconds and at least MinTTL.
func WithTTL(d time.Duration) Option {
	return func(o *options) error {
		switch {
		case d < MinTTL:
			return invalid("WithTTL(%v): under the minimum %v (etcd grants no shorter lease)", d, MinTTL)
		case d%time.Second != 0:
			return invalid("WithTTL(%v): not a whole number of seconds (etcd counts leases in seconds)", d)
		}
		o.ttl = d
		return nil
	}
}

// WithRenewInterval sets how often the client renews its session lease while it
// holds a lock (default a third of the TTL, so a renewal or two may fail without
// losing the locks). While it holds none, it renews every half TTL, or at this
// interval if that is longer. It must be positive and under the TTL.
func WithRenewInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("WithRenewInterval(%v): not positive", d)
		}
		o.interval = d
		return nil
	}
}

// WithPrefix sets the etcd key prefix under which lock keys live (default
// "/fencegate/locks/"). It must be non-empty, end with "/" and contain no control
// characters. Clients that share locks must share the prefix.
func WithPrefix(p string) Option {
	return func(o *options) error {
		switch {
		case p == "":
			return invalid("WithPrefix(\"\"): empty key prefix")
		case !strings.HasSuffix(p, "/"):
			return invalid("WithPrefix(%q): does not end with \"/\"", p)
		case strings.IndexFunc(p, unicode.IsControl) >= 0:
			return invalid("WithPrefix(%q): contains a control character", p)
		}
		o.prefix = p
		return nil
	}
}

// WithIdentity sets the client ID stored with every lock this client takes and
// shown by Holder and List (default host-pid-random). It must be 1 to 200 bytes
// without control characters.
func WithIdentity(id string) Option {
	return func(o *options) error {
		switch {
		case id == "":
			return invalid("WithIdentity(\"\"): empty identity")
		case len(id) > 200:
			return invalid("WithIdentity: identity is %d bytes, the limit is 200", len(id))
		case strings.IndexFunc(id, unicode.IsControl) >= 0:
			return invalid("WithIdentity(%q): contains a control character", id)
		}
		o.id = id
		return nil
	}
}

func buildOptions(opts []Option) (options, error) {
	o := options{ttl: defaultTTL, prefix: defaultPrefix}
	for i, opt := range opts {
		if opt == nil {
			return o, invalid("New: option %d is nil", i)
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if o.interval == 0 {
		o.interval = o.ttl / 3
	}
	if o.interval >= o.ttl {
		return o, invalid("WithRenewInterval(%v): renewal interval is not under the TTL %v", o.interval, o.ttl)
	}
	o.idle = max(o.interval, o.ttl/2)
	return o, nil
}

// LockOption configures one acquire. An unusable option makes the call fail
// before any I/O with an error wrapping fence.ErrInvalidArgument.
type LockOption func(*lockOptions) error

type lockOptions struct {
	manual  bool
	lease   time.Duration
	value   []byte        // stored with the key (WithValue)
	watch   bool          // the lock watches its key (a term of Lead)
	maxHold time.Duration // WithMaxHold; 0: none
}

// maxValueSize is the largest value WithValue accepts: with its base64 form,
// the holder fields and the key it stays under etcd's default request limit
// (--max-request-bytes, 1.5 MiB).
const maxValueSize = 1 << 20

// WithValue stores value with the lock while it is held (a leader's address),
// readable by everyone: Holder and List return it as Info.Value, Watch reports
// it with each grant. It must be at most 1 MiB.
func WithValue(value []byte) LockOption {
	return func(o *lockOptions) error {
		if len(value) > maxValueSize {
			return invalid("WithValue: value is %d bytes, the limit is %d", len(value), maxValueSize)
		}
		o.value = append([]byte{}, value...) // the caller may reuse its slice
		return nil
	}
}

// WithManualRenewal makes the lock live only while the caller renews it: a lock
// not Renewed within lease is deleted by the client itself and reported lost,
// so a stuck job in a live process loses its lock too. A lease of 0 means the
// session TTL; otherwise it must be at least MinTTL.
func WithManualRenewal(lease time.Duration) LockOption {
	return func(o *lockOptions) error {
		if lease < 0 || (lease > 0 && lease < MinTTL) {
			return invalid("WithManualRenewal(%v): lock lease is under the minimum %v", lease, MinTTL)
		}
		o.manual = true
		o.lease = lease
		return nil
	}
}

func buildLockOptions(sessionTTL time.Duration, opts []LockOption) (lockOptions, error) {
	var o lockOptions
	for i, opt := range opts {
		if opt == nil {
			return o, invalid("lock option %d is nil", i)
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if o.manual && o.lease == 0 {
		o.lease = sessionTTL
	}
	return o, checkMaxHold(o, sessionTTL)
}
