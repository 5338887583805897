package lockclient

import (
	"context"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// LeaderObserver is told about the terms of Lead, when the Observer given to
// WithObserver also implements it (lockmetrics.Metrics does). Its methods are
// called synchronously from Lead, so they must be cheap and must not block.
//
// TermBegun is called once per term before fn runs; TermEnded once per term,
// after its TermBegun, when the term has ended and its lock was released (or
// lost): a process that never led is never told a term ended. cause is one of
//
//	resigned       Lead's ctx ended; the lock was released for a successor
//	returned       fn returned nil; released, Lead returned nil
//	failed         fn returned an error; released, Lead returned a *TermError
//	panicked       fn panicked; released, the panic passed on
//	lease_expired  the session lease ran out (the term was lost)
//	key_deleted    someone else deleted the lock's key (the term was lost)
//	closed         the Client was closed
//
// The Lock's own end is also reported to Observer.Ended, as for any lock.
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
