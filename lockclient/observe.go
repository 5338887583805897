package lockclient

import (
	"context"
	"errors"
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
	// Acquired reports the end of one Acquire or TryAcquire of name: its result
	// and how long the call took (for Acquire, mostly the wait for the holder).
	Acquired(name string, result AcquireResult, wait time.Duration)
	// Ended reports that a lock handed out by Acquire or TryAcquire ended, why,
	// and how long it was held, just before its Done closes. Each lock ends
	// exactly once.
	Ended(name string, token fence.Token, reason EndReason, held time.Duration)
	// KeepAlive reports one renewal of the session lease: its round trip, and
	// etcd's error or nil.
	KeepAlive(rtt time.Duration, err error)
}

// SessionObserver is an Observer that is also told when a Client's session
// lease starts and when it is lost. A Client checks its Observer for these
// methods once, in New; lockmetrics.Metrics has them. The same rules apply as
// for Observer's methods.
type SessionObserver interface {
	Observer
	// SessionStarted reports that a Client was granted a session lease: its
	// first, or a new one after a lost session.
	SessionStarted()
	// SessionLost reports that a Client's session was lost, with the number of
	// locks that ended with it, just before their Done channels close.
	SessionLost(locks int)
}

// AcquireResult is how an Acquire or TryAcquire ended.
type AcquireResult int

const (
	// AcquireGranted: the lock was granted.
	AcquireGranted AcquireResult = iota + 1
	// AcquireHeldByOther: TryAcquire found the lock held.
	AcquireHeldByOther
	// AcquireError: the call failed (bad input, etcd's error, ctx ended, the
	// Client closed or lost).
	AcquireError
)

// String returns "granted", "held_by_other" or "error": metric label values.
func (r AcquireResult) String() string {
	switch r {
	case AcquireGranted:
		return "granted"
	case AcquireHeldByOther:
		return "held_by_other"
	case AcquireError:
		return "error"
	}
	return "unknown"
}

// EndReason is why a Lock ended.
type EndReason int

const (
	// EndReleased: Release was called.
	EndReleased EndReason = iota + 1
	// EndClosed: the Client was closed (its lease revoked).
	EndClosed
	// EndLeaseExpired: lost with its session: the session lease ran out
	// without a confirmed renewal, or etcd no longer had it.
	EndLeaseExpired
	// EndNotRenewed: lost; a WithManualRenewal lock was not Renewed within its
	// lease duration.
	EndNotRenewed
	// EndKeyDeleted: lost; the lock's key was deleted or replaced by someone
	// else (found by Renew, Release or a new grant of the same name).
	EndKeyDeleted
)

// String returns "released", "closed", "lease_expired", "not_renewed" or
// "key_deleted": metric label values.
func (r EndReason) String() string {
	switch r {
	case EndReleased:
		return "released"
	case EndClosed:
		return "closed"
	case EndLeaseExpired:
		return "lease_expired"
	case EndNotRenewed:
		return "not_renewed"
	case EndKeyDeleted:
		return "key_deleted"
	}
	return "unknown"
}

// Lost reports whether the lock was lost rather than given up.
func (r EndReason) Lost() bool { return r >= EndLeaseExpired && r <= EndKeyDeleted }

// WithLogger makes the Client log through l with slog attributes: grants and
// waits (Info/Debug), releases (Info), losses with their cause and keepalive
// failures (Warn). A nil l, the default, logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.logger = l
		return nil
	}
}

// WithObserver makes the Client report acquisitions, lock ends and keepalives
// to obs (see Observer). A nil obs, the default, reports nothing.
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
	res := AcquireGranted
	var held *HeldError
	switch {
	case err == nil:
	case errors.As(err, &held):
		res = AcquireHeldByOther
	default:
		res = AcquireError
	}
	if c.obs != nil {
		c.obs.Acquired(name, res, d)
	}
	if c.log == nil {
		return
	}
	switch res {
	case AcquireGranted:
		c.log.LogAttrs(ctx, slog.LevelInfo, "lock granted",
			slog.String("lock", name), slog.Int64("token", int64(l.token)),
			slog.Duration("wait", d), slog.Bool("manual_renewal", l.manual))
	case AcquireHeldByOther:
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
func (c *Client) logEnd(l *Lock, reason EndReason, held time.Duration) {
	if c.log == nil {
		return
	}
	lvl, msg := slog.LevelInfo, "lock released"
	switch {
	case reason.Lost():
		lvl, msg = slog.LevelWarn, "lock lost"
	case reason == EndClosed:
		msg = "lock released by close"
	}
	c.log.LogAttrs(context.Background(), lvl, msg,
		slog.String("lock", l.name), slog.Int64("token", int64(l.token)),
		slog.String("cause", reason.String()), slog.Duration("held", held))
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
	if c.sobs != nil {
		c.sobs.SessionStarted()
	}
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelDebug, "session started",
			slog.Int64("lease", int64(lease)), slog.Duration("ttl", c.ttl))
	}
}

// sessionLost reports the loss of the session lease and of the locks it held.
func (c *Client) sessionLost(lease clientv3.LeaseID, why string, locks int) {
	if c.sobs != nil {
		c.sobs.SessionLost(locks)
	}
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "session lost",
			slog.Int64("lease", int64(lease)), slog.String("cause", why),
			slog.Int("locks_lost", locks))
	}
}
