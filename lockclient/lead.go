package lockclient

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Lead campaigns for the lock name and runs fn with each term it wins. A
// campaign is an Acquire with opts (WithValue: the leader's address); a term
// is the granted *Lock, which also watches its key. fn must return when its
// term's Context ends.
//
// fn's return ends the term, never Lead: whether fn returned nil, an error
// (fence.ErrStale after an operator's fence, say) or its term was lost, the
// lock is released and Lead campaigns again, after a pause when fn returned
// by itself (100 ms, doubling to 1 s while terms end so in a row), so that a
// fn that returns at once does not spin. A panic in fn releases
// the lock and passes on. Lead returns only when ctx ends (ctx's error; a held
// term is released at once), the Client is closed (ErrClosed), or etcd
// refuses the campaign for good (permission denied, auth failed); bad input
// fails with fence.ErrInvalidArgument before any I/O. Other etcd errors are
// retried. Terms are logged and told to the Observer (see Observer.TermEnded).
func (c *Client) Lead(ctx context.Context, name string, fn func(term *Lock) error, opts ...LockOption) error {
	if fn == nil {
		return invalid("Lead(%q): nil function", name)
	}
	opts = append(opts[:len(opts):len(opts)], watchKey)
	backoff, failed := retryDelay, retryDelay
	for {
		term, err := c.Acquire(ctx, name, opts...)
		if err != nil {
			if !c.retryCampaign(ctx, name, err, &backoff) {
				return err
			}
			continue
		}
		backoff = retryDelay
		if term.ctx.Err() != nil {
			continue // ended between grant and now (session lost): never handed to fn
		}
		switch c.runTerm(ctx, term, fn) {
		case causeResigned:
			return ctx.Err()
		case causeClosed:
			return ErrClosed
		case causeFailed, causeReturned: // so that fn does not spin
			if err := c.sleep(ctx, failed); err != nil {
				return err
			}
			failed = min(2*failed, time.Second)
		default:
			failed = retryDelay
		}
	}
}

// watchKey makes a lock watch its own key (a term of Lead).
func watchKey(o *lockOptions) error {
	o.watch = true
	return nil
}

// runTerm runs fn for term, ends the term and returns why it ended. A panic
// in fn passes through, after the term has ended.
func (c *Client) runTerm(ctx context.Context, term *Lock, fn func(*Lock) error) string {
	t := &termRun{term: term, began: time.Now(), resigned: make(chan struct{})}
	c.termBegun(term)
	t.stopResign = context.AfterFunc(ctx, func() { // resign at once
		defer close(t.resigned)
		c.releaseTerm(term)
	})
	defer func() {
		if !t.returned { // fn panicked or called runtime.Goexit
			c.endTerm(ctx, t)
		}
	}()
	t.fnErr = fn(term)
	t.returned = true
	return c.endTerm(ctx, t)
}

// termRun is one term's state while fn runs.
type termRun struct {
	term       *Lock
	began      time.Time
	stopResign func() bool
	resigned   chan struct{}
	returned   bool
	fnErr      error
}

// endTerm ends t's term, reports it and returns its cause.
func (c *Client) endTerm(ctx context.Context, t *termRun) string {
	if !t.stopResign() {
		<-t.resigned // ctx ended: the term is released, or being
	}
	cause := termCause(t.term, ctx.Err() != nil, t.returned, t.fnErr)
	c.releaseTerm(t.term)
	c.termEnded(t.term, time.Since(t.began), cause, t.fnErr)
	return cause
}

// Why a term ended, as the log and Observer.TermEnded name it; a loss is
// named by endLabel.
const (
	causeResigned = "resigned" // Lead's ctx ended: released for a successor
	causeReturned = "returned" // fn returned nil
	causeFailed   = "failed"   // fn returned an error
	causePanicked = "panicked" // fn panicked (or called runtime.Goexit)
	causeClosed   = "closed"   // the Client was closed
)

// termCause says why term ended: by what ended its Lock first (a loss, Close),
// the resign when Lead's ctx ended, or else by how fn came back.
func termCause(term *Lock, resigned, returned bool, fnErr error) string {
	cause := context.Cause(term.ctx) // nil while the term is held
	switch {
	case errors.Is(cause, ErrClosed):
		return causeClosed
	case errors.Is(cause, fence.ErrLost):
		return endLabel(cause) // lease_expired, not_renewed, key_deleted, max_hold
	case resigned:
		return causeResigned
	case !returned:
		return causePanicked
	case fnErr != nil:
		return causeFailed
	}
	return causeReturned
}

// releaseTerm releases term if it is still held, bounded by the TTL; a failed
// Txn is retried in the background (see Lock.Release).
func (c *Client) releaseTerm(term *Lock) {
	if term.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	term.Release(ctx)
}

// retryCampaign reports whether a failed campaign should be tried again, after
// a pause that doubles up to a second; it logs the failure.
func (c *Client) retryCampaign(ctx context.Context, name string, err error, backoff *time.Duration) bool {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, fence.ErrInvalidArgument) ||
		errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) {
		return false
	}
	c.campaignFailed(name, err)
	if c.sleep(ctx, *backoff) != nil {
		return false
	}
	*backoff = min(2**backoff, time.Second)
	return true
}

// termBegun reports a term of Lead begun.
func (c *Client) termBegun(l *Lock) {
	if c.obs != nil {
		c.obs.TermBegun(l.name, l.token)
	}
	c.logAt(slog.LevelInfo, "leader term begun", slog.String("lock", l.name), slog.Int64("token", int64(l.token)))
}

// termEnded reports the end of a term of Lead, with fn's error if it failed.
func (c *Client) termEnded(l *Lock, held time.Duration, cause string, fnErr error) {
	if c.obs != nil {
		c.obs.TermEnded(l.name, l.token, held, cause)
	}
	lvl := slog.LevelWarn
	if cause == causeResigned || cause == causeReturned || cause == causeClosed {
		lvl = slog.LevelInfo
	}
	attrs := []slog.Attr{slog.String("lock", l.name), slog.Int64("token", int64(l.token)),
		slog.String("cause", cause), slog.Duration("held", held)}
	if fnErr != nil {
		attrs = append(attrs, slog.Any("error", fnErr))
	}
	c.logAt(lvl, "leader term ended", attrs...)
}

func (c *Client) campaignFailed(name string, err error) {
	c.logAt(slog.LevelWarn, "leader campaign failed, retrying", slog.String("lock", name), slog.Any("error", err))
}
