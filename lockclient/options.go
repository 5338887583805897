package lockclient

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/fencegate/fencegate/fence"
)

// Defaults for New.
const (
	// defaultTTL is the session lease's time to live.
	defaultTTL = 10 * time.Second
	// defaultPrefix is the key prefix under which lock keys live.
	defaultPrefix = "/fencegate/locks/"
	// MinTTL is the shortest session TTL and lock lease this package accepts:
	// etcd counts leases in whole seconds. etcd raises a lease under 1.5 x its
	// election timeout, rounded up (a default etcd, election timeout 1 s, grants
	// 2 s at least; one with 500 ms grants 1 s). Deadlines count from the TTL
	// etcd returns, so a raised lease keeps them right: the Client logs it
	// (Warn) and its Locks' Lease reports it.
	MinTTL = 1 * time.Second
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
	// how often a call waiting on an etcd it cannot reach says so (tests shorten it)
	unreachableEvery time.Duration
}

// WithTTL sets the session lease's time to live (default 10 s): how long after
// its last confirmed renewal a silent (crashed, frozen, cut off) client keeps
// its locks. It must be whole seconds and at least MinTTL; etcd may grant more
// (see MinTTL).
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
	o := options{ttl: defaultTTL, prefix: defaultPrefix, unreachableEvery: 5 * time.Second}
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

// WithLogger makes the Client log through l with slog attributes: grants and
// waits (Info/Debug), releases (Info), losses with their cause, keepalive
// failures and waits on an unreachable etcd (Warn). A nil l, the default, logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.log = l
		return nil
	}
}

// WithObserver makes the Client report acquisitions, lock ends, keepalives,
// sessions, retries and Lead's terms to obs (see Observer). A nil obs, the default, reports nothing.
func WithObserver(obs Observer) Option {
	return func(o *options) error {
		o.obs = obs
		return nil
	}
}

// WithMaxHold caps how long the lock (a permit, a term of Lead) is held: at d
// after its acquire was sent it ends by itself, even while every renewal
// succeeds, with a cause matching ErrMaxHold and fence.ErrLost, and its keys
// are deleted (conditioned on its token) so the next holder is granted at once.
// A stuck holder then cannot keep a lock forever; its late writes are fenced as
// any lost holder's. d must be at least the lock's lease (the session TTL, or
// WithManualRenewal's lease).
func WithMaxHold(d time.Duration) LockOption {
	return func(o *lockOptions) error {
		if d <= 0 {
			return invalid("WithMaxHold(%v): not positive", d)
		}
		o.maxHold = d
		return nil
	}
}

// checkMaxHold refuses a max hold below the lock's lease: the grant would end
// before its holder could even be told it is lost by its lease.
func checkMaxHold(o lockOptions, sessionTTL time.Duration) error {
	lease := sessionTTL
	if o.manual {
		lease = o.lease
	}
	if o.maxHold > 0 && o.maxHold < lease {
		return invalid("WithMaxHold(%v): under the lock's lease %v", o.maxHold, lease)
	}
	return nil
}

// invalid returns an error wrapping fence.ErrInvalidArgument that says what
// argument or option is unusable and why.
func invalid(format string, args ...any) error {
	return fmt.Errorf("lockclient: "+format+": %w", append(args, fence.ErrInvalidArgument)...)
}
