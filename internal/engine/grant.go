// Package engine is the production code the adapters, lockclient and migrations
// share: one fenced write's path from an adapter's door to COMMIT (grant.go), the
// statements and errors of PostgreSQL written once for both drivers (postgres.go),
// the one Dialect with its quoting (dialect.go, row.go), the statement-shape cache,
// and the no-lock path's checks and bounds. fence imports none of it.
package engine

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// Checked is a grant checked and normalized once, at an adapter's door: resources
// sorted and distinct, token, lease and Done channel read once. It implements
// fence.Grant, Set, Leased and Watched, so every layer below the door takes it.
type Checked struct {
	resource  string
	resources []string // sorted, distinct
	token     fence.Token
	lease     time.Duration   // 0: the grant is not fence.Leased
	done      <-chan struct{} // nil: the grant is not fence.Watched
}

// Check is fence.CheckGrant, then the normalized grant; a *Checked is returned as it
// is, so a door that calls another door checks once.
func Check(g fence.Grant) (*Checked, error) {
	if c, ok := g.(*Checked); ok && c != nil {
		return c, nil
	}
	if err := fence.CheckGrant(g); err != nil {
		return nil, err
	}
	c := &Checked{resource: g.Resource(), resources: sortedResources(g), token: g.Token()}
	if l, ok := g.(fence.Leased); ok {
		c.lease = l.Lease()
	}
	if w, ok := g.(fence.Watched); ok {
		c.done = w.Done()
	}
	return c, nil
}

func (c *Checked) Resource() string      { return c.resource }
func (c *Checked) Token() fence.Token    { return c.token }
func (c *Checked) Resources() []string   { return c.resources }
func (c *Checked) Lease() time.Duration  { return c.lease }
func (c *Checked) Done() <-chan struct{} { return c.done }

// CheckOne is Check for a write that fences one resource (a single-row write, an
// object write): a fence.Set of several is refused with fence.ErrInvalidArgument
// before any I/O, rather than fence one of them.
func CheckOne(g fence.Grant) (*Checked, error) {
	c, err := Check(g)
	if err != nil {
		return nil, err
	}
	if len(c.resources) > 1 {
		return nil, fmt.Errorf("%w: grant %q covers %d resources: a single-resource write fences one; write a grant set's resources in a fenced transaction", fence.ErrInvalidArgument, g.Resource(), len(c.resources))
	}
	return c, nil
}

// CheckSingle is CheckOne's check alone.
func CheckSingle(g fence.Grant) error {
	_, err := CheckOne(g)
	return err
}

// DefaultIdleTimeout bounds a fenced transaction's idle time when neither the Store
// nor the grant (fence.Leased) says: the lock service's default lease.
const DefaultIdleTimeout = 10 * time.Second

// IdleTimeout is how long a fenced transaction of g may sit idle: override when > 0,
// else g's lease when > 0, else DefaultIdleTimeout; never under the servers' unit, a
// millisecond.
func IdleTimeout(g fence.Grant, override time.Duration) time.Duration {
	d := override
	if c, ok := g.(*Checked); ok && d <= 0 {
		d = c.lease
	} else if l, ok := g.(fence.Leased); ok && d <= 0 && !IsNil(g) {
		d = l.Lease()
	}
	if d <= 0 {
		d = DefaultIdleTimeout
	}
	return max(d, time.Millisecond)
}

// CheckLost returns fence.ErrLost when g is a fence.Watched grant whose Done channel
// has closed, else nil. Adapters call it right before COMMIT and before each request
// of a write that makes several.
func CheckLost(g fence.Grant) error {
	var done <-chan struct{}
	if c, ok := g.(*Checked); ok {
		done = c.done
	} else if w, ok := g.(fence.Watched); ok && !IsNil(g) {
		done = w.Done()
	}
	select {
	case <-done: // a nil channel never is
		return Lost(g.Resource(), g.Token())
	default:
		return nil
	}
}

// Lost returns fence.ErrLost for the lock of resource at token, naming them.
func Lost(resource string, token fence.Token) error {
	return fmt.Errorf("%w: %q at token %d", fence.ErrLost, resource, token)
}

// CommitUnknown returns fence.ErrCommitUnknown for op (COMMIT, or a single-row
// write's statement) under g whose reply was lost, wrapping the driver's err.
func CommitUnknown(g fence.Grant, op string, err error) error {
	if err == nil {
		return fmt.Errorf("%w: %s for %q at token %d", fence.ErrCommitUnknown, op, g.Resource(), g.Token())
	}
	return fmt.Errorf("%w: %s for %q at token %d: %w", fence.ErrCommitUnknown, op, g.Resource(), g.Token(), err)
}

// Resources returns the resources g fences, sorted by bytes and each once; adapters
// raise the marks in this order, so overlapping sets lock in one order.
func Resources(g fence.Grant) []string {
	if c, ok := g.(*Checked); ok {
		return c.resources
	}
	return sortedResources(g)
}

func sortedResources(g fence.Grant) []string {
	set, ok := g.(fence.Set)
	if !ok {
		return []string{g.Resource()}
	}
	res := slices.Clone(set.Resources())
	slices.Sort(res)
	return slices.Compact(res)
}

// Multi reports whether g fences more than one resource. A *lockclient.Lock is a
// fence.Set; one on a single name takes the single-resource path.
func Multi(g fence.Grant) bool {
	if c, ok := g.(*Checked); ok {
		return len(c.resources) > 1
	}
	set, ok := g.(fence.Set)
	return ok && len(set.Resources()) > 1 && len(Resources(g)) > 1
}

// IsNil reports whether v is nil or holds a nil pointer, map, slice, channel or
// function: a typed nil whose methods would dereference it.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Tx is an open fenced transaction as its adapter runs it.
type Tx interface {
	Refused() error // the fence's refusal met while fn ran (a raise sent with fn's first statement), or nil
	Commit() error  // the adapter's error for a failed commit (fence.ErrCommitUnknown for a lost reply)
	Rollback()      // ends the transaction if still open; safe after a failed Commit
}

// RunTx calls fn, then commits tx unless fn failed, the fence refused (even if fn
// swallowed the refusal) or g is known lost (fence.ErrLost). Every error and panic
// rolls tx back; a panic then goes on. A refusal fn swallowed before failing is
// joined to fn's error.
func RunTx(g *Checked, tx Tx, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
		if err != nil {
			tx.Rollback()
		}
	}()
	if err := fn(); err != nil {
		if r := tx.Refused(); r != nil && !errors.Is(err, r) {
			return errors.Join(r, err)
		}
		return err
	}
	if r := tx.Refused(); r != nil {
		return r
	}
	if err := CheckLost(g); err != nil {
		return err
	}
	return tx.Commit()
}

// Settings are the options every SQL adapter's Store takes alike, checked alike.
type Settings struct {
	Idle   time.Duration       // WithIdleTimeout; 0: the grant's lease or DefaultIdleTimeout
	Obs    fence.WriteObserver // WithObserver; nil: none
	KeyTTL time.Duration       // WithKeyTTL; 0: idempotency keys never expire
}

// SetIdleTimeout is WithIdleTimeout: d must be at least a millisecond, the servers' unit.
func (s *Settings) SetIdleTimeout(adapter string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%s: WithIdleTimeout(%v): want at least 1ms: %w", adapter, d, fence.ErrInvalidArgument)
	}
	s.Idle = d
	return nil
}

// SetKeyTTL is WithKeyTTL (see CheckKeyTTL).
func (s *Settings) SetKeyTTL(adapter string, d time.Duration) error {
	if err := CheckKeyTTL(d); err != nil {
		return fmt.Errorf("%s: %w", adapter, err)
	}
	s.KeyTTL = d
	return nil
}

// IdleMS is the idle bound of g's transactions in milliseconds, as text.
func (s *Settings) IdleMS(g fence.Grant) string {
	return strconv.FormatInt(IdleTimeout(g, s.Idle).Milliseconds(), 10)
}

// Observe reports a fenced write's result to the observer, if any; deferred by each
// fenced method.
func (s *Settings) Observe(adapter, op string, errp *error) {
	if s.Obs != nil {
		s.Obs.FencedWrite(adapter, op, *errp)
	}
}

// IdleTimeoutErr returns fence.ErrIdleTimeout for g, wrapping err: the server ended
// the fenced transaction for sitting idle past its bound.
func IdleTimeoutErr(g fence.Grant, err error) error {
	return fmt.Errorf("%w: fence %q at token %d: %w", fence.ErrIdleTimeout, g.Resource(), g.Token(), err)
}

// Apply runs a constructor's options on s in order, skipping nil ones; the first
// error stops it.
func Apply[S any, O ~func(S) error](s S, opts []O) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return err
		}
	}
	return nil
}

// WriteResult classifies the error a fenced write returned, for metric labels and logs:
// "accepted" (nil), "stale" (fence.ErrStale), "lost" (fence.ErrLost),
// "commit_unknown" (fence.ErrCommitUnknown) or "error" (anything else).
func WriteResult(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case errors.Is(err, fence.ErrStale):
		return "stale"
	case errors.Is(err, fence.ErrLost):
		return "lost"
	case errors.Is(err, fence.ErrCommitUnknown):
		return "commit_unknown"
	}
	return "error"
}
