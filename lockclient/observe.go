package lockclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Observer is told what a Client does, for metrics. Its methods are called
// synchronously from the Client's calls and its session goroutine, so they
// must be cheap and must not block or call back into the Client; they may be
// called concurrently. The lockmetrics package implements it with Prometheus.
type Observer interface {
	// Acquired reports the end of one Acquire, TryAcquire, AcquireSet or
	// TryAcquireSet of name (a set's first name) and how long it took (for a
	// wait, mostly the wait for the holder). err is nil when the lock was
	// granted, matches ErrHeld when another holder had it, and is otherwise the
	// call's error.
	Acquired(name string, wait time.Duration, err error)
	// Ended reports that a lock ended, how long it was held and its cause, just
	// before its Done closes; each lock ends exactly once. cause is what
	// context.Cause of the lock's Context reports: ErrReleased, ErrClosed, or,
	// when the lock was lost rather than given up, an error matching
	// fence.ErrLost. A loss also matches ErrSessionLost when the session lease
	// ran out, ErrNotRenewed when a WithManualRenewal lock was not renewed in
	// time, and neither when its key was deleted or replaced by someone else.
	Ended(name string, token fence.Token, held time.Duration, cause error)
	// KeepAlive reports one renewal of the session lease: its round trip, and
	// etcd's error or nil.
	KeepAlive(rtt time.Duration, err error)
	// Session reports a change of the Client's session lease. err is nil when
	// one was granted (the first, or a new one after a loss); it matches
	// ErrSessionLost when the session was lost, and then locks is the number of
	// locks that end with it (their Done channels close just after).
	Session(locks int, err error)
}

// RetryObserver is told of each request etcd refused before acting on it
// ("etcdserver: too many requests") and the Client sends again after a
// jittered pause, when the Observer given to WithObserver also implements it.
// op is "acquire", "release", "renew" or "grant".
type RetryObserver interface {
	Retried(op string, err error)
}

// WithLogger makes the Client log through l with slog attributes: grants and
// waits (Info/Debug), releases (Info), losses with their cause and keepalive
// failures (Warn). A nil l, the default, logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.logger = l
		return nil
	}
}

// WithObserver makes the Client report acquisitions, lock ends, keepalives and
// sessions to obs (see Observer). A nil obs, the default, reports nothing.
func WithObserver(obs Observer) Option {
	return func(o *options) error {
		o.observer = obs
		return nil
	}
}

// acquired reports the end of an acquire call.
func (c *Client) acquired(ctx context.Context, name string, start time.Time, l *Lock, err error, wait bool) {
	if c.obs == nil && c.log == nil {
		return
	}
	d := time.Since(start)
	if c.obs != nil {
		c.obs.Acquired(name, d, err)
	}
	if c.log == nil {
		return
	}
	var held *HeldError
	switch {
	case err == nil:
		c.log.LogAttrs(ctx, slog.LevelInfo, "lock granted",
			slog.String("lock", name), slog.Int64("token", int64(l.token)),
			slog.Duration("wait", d), slog.Bool("manual_renewal", l.manual))
	case errors.As(err, &held):
		c.log.LogAttrs(ctx, slog.LevelDebug, "lock held by another",
			slog.String("lock", name), slog.Int64("holder_token", int64(held.Token)),
			slog.String("holder", held.Holder.ClientID))
	default:
		lvl := slog.LevelWarn
		if ctx.Err() != nil && wait {
			lvl = slog.LevelDebug // the caller gave up waiting
		}
		c.log.LogAttrs(ctx, lvl, "lock not acquired",
			slog.String("lock", name), slog.Duration("wait", d), slog.Any("error", err))
	}
}

// waiting logs that Acquire found name held and waits for its deletion.
func (c *Client) waiting(ctx context.Context, name string, kv *mvccpb.KeyValue) {
	if c.log == nil || !c.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	info := decodeInfo(name, kv)
	c.log.LogAttrs(ctx, slog.LevelDebug, "lock held, waiting",
		slog.String("lock", name), slog.Int64("holder_token", int64(info.Token)),
		slog.String("holder", info.ClientID))
}

// logEnd logs that l ended after it was held for held.
func (c *Client) logEnd(l *Lock, cause error, held time.Duration) {
	if c.log == nil {
		return
	}
	lvl, msg := slog.LevelInfo, "lock released"
	switch {
	case errors.Is(cause, fence.ErrLost):
		lvl, msg = slog.LevelWarn, "lock lost"
	case errors.Is(cause, ErrClosed):
		msg = "lock released by close"
	}
	c.log.LogAttrs(context.Background(), lvl, msg,
		slog.String("lock", l.name), slog.Int64("token", int64(l.token)),
		slog.String("cause", endLabel(cause)), slog.Duration("held", held))
}

// endLabel names a lock's end cause in logs.
func endLabel(cause error) string {
	switch {
	case errors.Is(cause, ErrReleased):
		return "released"
	case errors.Is(cause, ErrClosed):
		return "closed"
	case errors.Is(cause, ErrSessionLost):
		return "lease_expired"
	case errors.Is(cause, ErrNotRenewed):
		return "not_renewed"
	}
	return "key_deleted"
}

// keptAlive reports one session renewal.
func (c *Client) keptAlive(lease clientv3.LeaseID, rtt time.Duration, deadline time.Time, err error) {
	if errors.Is(err, context.Canceled) {
		return // the Client is closing or the session ended: not a failure
	}
	if c.obs != nil {
		c.obs.KeepAlive(rtt, err)
	}
	if c.log != nil && err != nil {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "session keepalive failed",
			slog.Int64("lease", int64(lease)), slog.Duration("rtt", rtt),
			slog.Duration("left", time.Until(deadline)), slog.Any("error", err))
	}
}

// sessionStarted reports a new session lease.
func (c *Client) sessionStarted(lease clientv3.LeaseID) {
	if c.obs != nil {
		c.obs.Session(0, nil)
	}
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelDebug, "session started",
			slog.Int64("lease", int64(lease)), slog.Duration("ttl", c.ttl))
	}
}

// sessionLost reports the loss of the session lease and of the locks it held.
func (c *Client) sessionLost(lease clientv3.LeaseID, why string, locks int) {
	if c.obs != nil {
		c.obs.Session(locks, fmt.Errorf("%w: %s", ErrSessionLost, why))
	}
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "session lost",
			slog.Int64("lease", int64(lease)), slog.String("cause", why),
			slog.Int("locks_lost", locks))
	}
}

// retried reports a request etcd refused as overloaded, sent again.
func (c *Client) retried(op string, err error) {
	if ro, ok := c.obs.(RetryObserver); ok {
		ro.Retried(op, err)
	}
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "etcd overloaded, retrying",
			slog.String("op", op), slog.Any("error", err))
	}
}

// LeaderObserver is told about the terms of Lead when the Observer also
// implements it (lockmetrics.Metrics does); cheap, never blocking. TermBegun
// comes once per term before fn runs; TermEnded once per begun term, after its
// lock was released or lost, with cause one of
//
//	resigned       Lead's ctx ended; released for a successor
//	returned       fn returned nil; released, Lead returned nil
//	failed         fn returned an error; released, Lead returned a *TermError
//	panicked       fn panicked; released, the panic passed on
//	lease_expired  the session lease ran out (lost)
//	key_deleted    someone else deleted the lock's key (lost)
//	closed         the Client was closed
type LeaderObserver interface {
	TermBegun(name string, token fence.Token)
	TermEnded(name string, token fence.Token, held time.Duration, cause string)
}

func (c *Client) termBegun(l *Lock) {
	if lo, ok := c.obs.(LeaderObserver); ok {
		lo.TermBegun(l.name, l.token)
	}
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelInfo, "leader term begun",
			slog.String("lock", l.name), slog.Int64("token", int64(l.token)))
	}
}

func (c *Client) termEnded(l *Lock, held time.Duration, cause string, fnErr error) {
	if lo, ok := c.obs.(LeaderObserver); ok {
		lo.TermEnded(l.name, l.token, held, cause)
	}
	if c.log == nil {
		return
	}
	lvl := slog.LevelInfo
	switch cause {
	case causeResigned, causeReturned, causeClosed:
	default:
		lvl = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("lock", l.name), slog.Int64("token", int64(l.token)),
		slog.String("cause", cause), slog.Duration("held", held)}
	if fnErr != nil {
		attrs = append(attrs, slog.Any("error", fnErr))
	}
	c.log.LogAttrs(context.Background(), lvl, "leader term ended", attrs...)
}

func (c *Client) campaignFailed(name string, err error) {
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "leader campaign failed, retrying",
			slog.String("lock", name), slog.Any("error", err))
	}
}
