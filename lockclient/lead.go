package lockclient

import (
	"context"
	"errors"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lead campaigns for the lock name and runs fn with each term it wins, until
// ctx ends. A campaign is an Acquire with opts (WithValue: the leader's
// address); a term is the granted *Lock, which also watches its key. A lost
// term never ends Lead: once fn has returned it campaigns again. fn must
// return when its term's Context ends.
//
// When ctx ends the lock is released at once and Lead returns ctx's error;
// fn's nil return releases the lock and ends Lead with nil, its error with a
// *TermError; a panic in fn releases the lock and passes on. Errors also:
// fence.ErrInvalidArgument (before any I/O), ErrClosed, or etcd's error refusing
// the campaign for good (permission denied); other etcd errors are retried.
func (c *Client) Lead(ctx context.Context, name string, fn func(term *Lock) error, opts ...LockOption) error {
	if fn == nil {
		return invalid("Lead(%q): nil function", name)
	}
	opts = append(opts[:len(opts):len(opts)], watchKey)
	backoff := retryDelay
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
		if done, err := c.runTerm(ctx, term, fn); done {
			return err
		}
	}
}

// watchKey makes a lock watch its own key (a term of Lead).
func watchKey(o *lockOptions) error {
	o.watch = true
	return nil
}

// runTerm runs fn for term and ends the term; done reports that Lead ends,
// with err. A panic in fn passes through, after the term has ended.
func (c *Client) runTerm(ctx context.Context, term *Lock, fn func(*Lock) error) (done bool, err error) {
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

// endTerm ends t's term, reports it, and says whether Lead ends and with what.
func (c *Client) endTerm(ctx context.Context, t *termRun) (done bool, err error) {
	if !t.stopResign() {
		<-t.resigned // ctx ended: the term is released, or being
	}
	cause := termCause(t.term, ctx.Err() != nil, t.returned, t.fnErr)
	c.releaseTerm(t.term)
	c.termEnded(t.term, time.Since(t.began), cause, t.fnErr)
	switch cause {
	case causeResigned:
		return true, ctx.Err()
	case causeClosed:
		return true, ErrClosed
	case causeFailed:
		return true, &TermError{Name: t.term.name, Token: t.term.token, Err: t.fnErr}
	case causeReturned:
		return true, nil
	}
	return false, nil // lost: campaign again
}

// Why a term ended, as the log and LeaderObserver.TermEnded name it.
const (
	causeResigned = "resigned" // Lead's ctx ended: released for a successor
	causeReturned = "returned" // fn returned nil: released, Lead ends
	causeFailed   = "failed"   // fn returned an error: released, Lead ends
	causePanicked = "panicked" // fn panicked (or called runtime.Goexit): released
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

// followKey ends l as lost once etcd reports its key deleted or replaced; one
// wait for the term's life.
func (c *Client) followKey(l *Lock) {
	defer c.loops.Done()
	key := l.keys[0]
	gone := func(kv *mvccpb.KeyValue) bool { return kv == nil || fence.Token(kv.CreateRevision) != l.token }
	err := c.wait(l.ctx, watchSpec{
		key: key, rev: int64(l.token) + 1, // the key was created at the token's revision
		event: func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE || gone(ev.Kv) },
		reread: func(ctx context.Context) (int64, bool, error) {
			resp, err := c.cli.Get(ctx, key)
			if err != nil || len(resp.Kvs) == 0 {
				return 0, err == nil, err
			}
			return resp.Header.Revision + 1, gone(resp.Kvs[0]), nil
		},
	})
	if err == nil {
		c.keyGone(l.ctx, l)
	}
}
