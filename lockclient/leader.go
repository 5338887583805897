package lockclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// MaxValueSize is the largest value WithValue accepts: with its base64 form,
// the holder fields and the key it stays under etcd's default request limit
// (--max-request-bytes, 1.5 MiB). A cluster configured with a lower limit
// refuses a larger value with etcd's own error at the first campaign.
const MaxValueSize = 1 << 20

// LeadOption configures one Lead. An unusable option makes Lead fail before
// any I/O with an error wrapping fence.ErrInvalidArgument that names it.
type LeadOption func(*leadOptions) error

type leadOptions struct {
	value []byte
}

// WithValue stores value with the lock while this Lead holds it (for example
// the leader's address), readable by everyone: Holder and List return it as
// Info.Value, and Watch reports it with each term. It must be at most
// MaxValueSize bytes.
func WithValue(value []byte) LeadOption {
	return func(o *leadOptions) error {
		if len(value) > MaxValueSize {
			return invalid("WithValue: value is %d bytes, the limit is %d", len(value), MaxValueSize)
		}
		o.value = append([]byte{}, value...) // the caller may reuse its slice
		return nil
	}
}

// TermError is what Lead returns when fn returned an error while its term was
// still held. It matches fn's error (errors.Is, errors.As), never fence.ErrLost
// for a lost term: Lead does not end on a lost term, it campaigns again.
type TermError struct {
	Name  string
	Token fence.Token // the term in which fn failed
	Err   error       // what fn returned
}

func (e *TermError) Error() string {
	return fmt.Sprintf("lockclient: lead %q: term %d: %v", e.Name, e.Token, e.Err)
}

// Unwrap returns fn's error.
func (e *TermError) Unwrap() error { return e.Err }

// Lead campaigns for the lock name and runs fn for each term it wins, until ctx
// ends: the leader-election loop of a process that must do some work on exactly
// one machine at a time (a scheduler, a singleton consumer).
//
// Each campaign is an Acquire of name: it waits, writing nothing, while another
// process leads. A term is the granted *Lock: its Token rises with every term of
// any process, its Context ends when the term ends, and handing it to fence.Exec
// or an adapter makes the database refuse the term's writes once a newer term
// wrote, so a leader that froze and woke after it was replaced cannot overwrite
// its successor's work. Unlike a plain lock, a term also watches its own key and
// ends (as lost, cause matching fence.ErrLost) within moments of the key being
// deleted by anyone else, such as an operator's fencectl release; it also ends
// when the session lease is lost (see Loss in the package doc).
//
// Guarantees:
//   - fn is called only with a term whose key etcd created under a live session
//     lease and whose conservative local deadline has not passed; never with an
//     ended Lock.
//   - A term ends exactly once, after it began. Observer and log report a term's
//     end only for a term whose begin they reported; a process that never led
//     is never told that it stopped leading.
//   - When ctx ends, the term's Context ends at once and the lock is released in
//     the same moment (one Txn), so a waiting successor takes over at once instead
//     of after a lease; Lead returns ctx's error once fn has returned and the
//     release was sent. fn must return when its term's Context ends; its fenced
//     writes are refused from then on.
//   - A lost term (lease expired, key deleted, Client's session lost) never ends
//     Lead: once fn has returned, Lead campaigns again, whatever fn returned. fn
//     tells a loss from its own failure by context.Cause(term.Context()).
//   - fn's own end while its term is held releases the lock (a successor takes
//     over at once): a nil return ends Lead with nil (the work is done), an error
//     ends it with a *TermError wrapping that error.
//   - A panic in fn releases the lock and is re-raised from Lead, on the same
//     goroutine, with the original stack still on it.
//
// Errors: an error wrapping fence.ErrInvalidArgument before any I/O for a bad
// name, a nil fn or an unusable option; a *TermError; ctx's error; ErrClosed
// after the Client's Close; or etcd's error refusing the campaign for good (such
// as permission denied). Other etcd errors (no leader, members down, a failed
// session grant) are retried, spaced out, until ctx ends.
func (c *Client) Lead(ctx context.Context, name string, fn func(term *Lock) error, opts ...LeadOption) error {
	lo, err := buildLeadOptions(name, fn, opts)
	if err != nil {
		return err
	}
	backoff := retryDelay
	for {
		term, err := c.acquire(ctx, &request{names: []string{name}, keys: []string{c.key(name)}, wait: true, lo: lockOptions{value: lo.value}})
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
		done, err := c.runTerm(ctx, term, fn)
		if done {
			return err
		}
	}
}

func buildLeadOptions(name string, fn func(*Lock) error, opts []LeadOption) (leadOptions, error) {
	var lo leadOptions
	if err := checkName(name); err != nil {
		return lo, err
	}
	if fn == nil {
		return lo, invalid("Lead(%q): nil function", name)
	}
	for i, opt := range opts {
		if opt == nil {
			return lo, invalid("Lead(%q): option %d is nil", name, i)
		}
		if err := opt(&lo); err != nil {
			return lo, err
		}
	}
	return lo, nil
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

// runTerm runs fn for term and ends the term. done reports that Lead ends, with
// err; otherwise the term was lost and Lead campaigns again. A panic in fn
// passes through, after the term has ended and the lock was released.
func (c *Client) runTerm(ctx context.Context, term *Lock, fn func(*Lock) error) (done bool, err error) {
	began := time.Now()
	c.termBegun(term)
	stopWatch := c.watchTerm(term)
	resigned := make(chan struct{})
	stopResign := context.AfterFunc(ctx, func() {
		defer close(resigned)
		c.releaseTerm(term)
	})
	var fnErr error
	returned := false
	defer func() {
		v := recover()
		if !stopResign() {
			<-resigned // ctx ended: the term is released, or being
		}
		cause := termCause(term, ctx.Err() != nil, returned, fnErr, v != nil)
		c.releaseTerm(term)
		stopWatch()
		c.termEnded(term, time.Since(began), cause, fnErr)
		if v != nil {
			panic(v)
		}
		switch cause {
		case causeResigned:
			done, err = true, ctx.Err()
		case causeClosed:
			done, err = true, ErrClosed
		case causeFailed:
			done, err = true, &TermError{Name: term.name, Token: term.token, Err: fnErr}
		case causeReturned:
			done, err = true, nil
		default: // lost: campaign again
		}
	}()
	fnErr = fn(term)
	returned = true
	return false, nil
}

// Why a term ended, as the log and LeaderObserver.TermEnded name it.
const (
	causeResigned = "resigned" // Lead's ctx ended: released for a successor
	causeReturned = "returned" // fn returned nil: released, Lead ends
	causeFailed   = "failed"   // fn returned an error: released, Lead ends
	causePanicked = "panicked" // fn panicked (or called runtime.Goexit): released
	causeClosed   = "closed"   // the Client was closed
)

// termCause says why term ended: by what ended its Lock first (the resign when
// Lead's ctx ended, a loss, Close), or else by how fn came back (fn itself may
// have released its term).
func termCause(term *Lock, resigned, returned bool, fnErr error, panicked bool) string {
	cause := context.Cause(term.ctx) // nil while the term is held
	switch {
	case errors.Is(cause, ErrClosed):
		return causeClosed
	case errors.Is(cause, fence.ErrLost):
		return endLabel(cause) // lease_expired, not_renewed, key_deleted
	case resigned:
		return causeResigned
	case panicked || !returned:
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
