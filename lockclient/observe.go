package lockclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// Observer is told what a Client does, for metrics. Its methods are called
// synchronously from the Client's calls and its session goroutine, so they
// must be cheap and must not block or call back into the Client; they may be
// called concurrently. The lockmetrics package implements it with Prometheus.
type Observer interface {
	// Acquired reports the end of one acquire call of name (a set's first
	// name; a granted permit's slot, "name/0001", as Ended names it) and how
	// long it took. err is nil when the lock was granted, matches
	// ErrHeld when another holder had it, and is otherwise the call's error.
	Acquired(name string, wait time.Duration, err error)
	// Ended reports that a lock ended, how long it was held and its cause
	// (context.Cause of its Context, see the package doc; a loss matching
	// neither ErrSessionLost nor ErrNotRenewed: someone else deleted or
	// replaced its key), just before its Done closes; once per lock.
	Ended(name string, token fence.Token, held time.Duration, cause error)
	// KeepAlive reports one renewal of the session lease: its round trip, and
	// etcd's error or nil.
	KeepAlive(rtt time.Duration, err error)
	// Session reports a change of the Client's session lease. err is nil when
	// one was granted (the first, or a new one after a loss); it matches
	// ErrSessionLost when the session was lost, and then locks is the number of
	// locks that ended with it (their Done channels closed just before).
	Session(locks int, err error)
	// Retried reports a request sent again: op "acquire", "release", "renew"
	// or "grant" when etcd refused it as overloaded ("too many requests"), and
	// op "connect" once per interval (5 s) that a call waits on an etcd it
	// cannot reach, with the last connection error.
	Retried(op string, err error)
	// TermBegun reports a term of Lead won, before fn runs.
	TermBegun(name string, token fence.Token)
	// TermEnded reports the end of a begun term, after its lock was released
	// or lost, once per term, with cause one of
	//
	//	resigned       Lead's ctx ended; released for a successor, Lead returns
	//	returned       fn returned nil; released, Lead campaigns again
	//	failed         fn returned an error; released, Lead campaigns again after a pause
	//	panicked       fn panicked; released, the panic passed on
	//	lease_expired  the session lease ran out (lost)
	//	not_renewed    a WithManualRenewal term was not renewed in time (lost)
	//	key_deleted    someone else deleted the lock's key (lost)
	//	max_hold       the term reached its WithMaxHold (lost)
	//	closed         the Client was closed; Lead returns ErrClosed
	TermEnded(name string, token fence.Token, held time.Duration, cause string)
}

// acquired reports the end of an acquire call.
// The caller checks that there is an Observer or a logger.
func (c *Client) acquired(ctx context.Context, name string, start time.Time, l *Lock, err error, wait bool) {
	d := time.Since(start)
	if err == nil && l != nil {
		name = l.name // a permit's slot: its release and end carry the same name
	}
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
	case errors.Is(cause, ErrMaxHold):
		return "max_hold"
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

// sessionStarted reports a new session lease of TTL granted; a lease longer
// than asked (etcd's minimum, see MinTTL) is logged as a warning.
func (c *Client) sessionStarted(lease clientv3.LeaseID, granted time.Duration) {
	if c.obs != nil {
		c.obs.Session(0, nil)
	}
	if granted > c.ttl {
		c.logAt(slog.LevelWarn, "etcd granted a longer session lease than asked", slog.Int64("lease", int64(lease)),
			slog.Duration("ttl", c.ttl), slog.Duration("granted", granted))
		return
	}
	c.logAt(slog.LevelDebug, "session started", slog.Int64("lease", int64(lease)), slog.Duration("ttl", c.ttl))
}

// sessionLost reports the loss of the session lease and of the locks it held.
func (c *Client) sessionLost(lease clientv3.LeaseID, why string, locks int) {
	if c.obs != nil {
		c.obs.Session(locks, fmt.Errorf("%w: %s", ErrSessionLost, why))
	}
	c.logAt(slog.LevelWarn, "session lost", slog.Int64("lease", int64(lease)),
		slog.String("cause", why), slog.Int("locks_lost", locks))
}

// retried reports a request etcd refused as overloaded, sent again.
func (c *Client) retried(op string, err error) {
	if c.obs != nil {
		c.obs.Retried(op, err)
	}
	c.logAt(slog.LevelWarn, "etcd overloaded, retrying", slog.String("op", op), slog.Any("error", err))
}

// unreachable reports that a call has waited for a connection to etcd for
// waited, with the last connection error.
func (c *Client) unreachable(waited time.Duration, err error) {
	if c.obs != nil {
		c.obs.Retried("connect", err)
	}
	c.logAt(slog.LevelWarn, "etcd unreachable, waiting", slog.String("endpoints", strings.Join(c.cli.Endpoints(), ",")),
		slog.Duration("waited", waited.Round(time.Millisecond)), slog.Any("error", err))
}

// connError says why conn is not up: an RPC that does not wait for a
// connection fails at once with grpc's last dial error, sending nothing.
func connError(ctx context.Context, conn *grpc.ClientConn, st connectivity.State) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if status.Code(err) == codes.Unavailable {
		return err
	}
	return fmt.Errorf("connection %s", strings.ToLower(st.String()))
}

// logAt logs msg with attrs when the Client has a logger.
func (c *Client) logAt(lvl slog.Level, msg string, attrs ...slog.Attr) {
	if c.log != nil {
		c.log.LogAttrs(context.Background(), lvl, msg, attrs...)
	}
}

// errEtcdClosed means the etcd client given to New was closed.
var errEtcdClosed = errors.New("the etcd client was closed")

// connected waits until the etcd client's connection is up, so that a grant's
// send time, from which the session deadline counts, is not spent dialing.
// Each interval it waits is reported (unreachable).
func (c *Client) connected(ctx context.Context) error {
	conn := c.cli.ActiveConnection()
	start := time.Now()
	next := start.Add(c.unreachableEvery)
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		switch st {
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown:
			return errEtcdClosed
		}
		wctx, cancel := context.WithDeadline(ctx, next)
		changed := conn.WaitForStateChange(wctx, st)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case !changed:
			c.unreachable(time.Since(start), connError(ctx, conn, st))
			next = time.Now().Add(c.unreachableEvery)
		}
	}
	return nil
}
