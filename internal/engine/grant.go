// Package engine is the production code the adapters, lockclient and migrations
// share, linked into users' binaries. grant.go is one fenced write's path from an
// adapter's door to COMMIT: the grant checked and normalized once, the options every
// SQL Store takes alike, and the one lifecycle of a fenced transaction over a handle
// each adapter implements. postgres.go is PostgreSQL's fence raise, its refusal and
// its single-row Update, written once for pgx and database/sql; dialect.go the one SQL
// Dialect with its identifier checks and quoting; shapes.go the bounded cache of
// statement shapes; idemkey.go the no-lock path's checks, bounds and backoff;
// lockname.go the lock names' check. fence imports none of it.
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

// Checked is a grant checked and normalized once, at an adapter's door: its resources
// sorted and each once, its token, lease and Done channel read once. It implements
// fence.Grant, fence.Set, fence.Leased and fence.Watched, so every layer below the
// door takes it where it took the caller's grant, and the helpers of this package
// read its fields instead of asking (and sorting) again.
type Checked struct {
	resource  string
	resources []string // sorted, distinct
	token     fence.Token
	lease     time.Duration   // 0: the grant is not fence.Leased
	done      <-chan struct{} // nil: the grant is not fence.Watched
}

// Check is fence.CheckGrant, then the normalized grant. A *Checked is returned as it
// is: a door that calls another door checks once.
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

// DefaultIdleTimeout is how long a fenced transaction may sit idle on the server
// (no statement running) before the server ends it, when neither the Store's option
// nor the grant (fence.Leased) says: the lock service's default lease.
const DefaultIdleTimeout = 10 * time.Second

// IdleTimeout returns how long a fenced transaction of g may sit idle: override when
// it is > 0 (a Store option), else g's Lease when g is fence.Leased and it is > 0,
// else DefaultIdleTimeout. It is never under a millisecond, the servers' unit.
func IdleTimeout(g fence.Grant, override time.Duration) time.Duration {
	d := override
	if c, ok := g.(*Checked); ok && d <= 0 {
		d = c.lease
	} else if d <= 0 {
		if l, ok := g.(fence.Leased); ok && !IsNil(g) {
			d = l.Lease()
		}
	}
	if d <= 0 {
		d = DefaultIdleTimeout
	}
	return max(d, time.Millisecond)
}

// CheckLost returns fence.ErrLost (see Lost) when g is a fence.Watched
// grant whose Done channel is closed, and nil otherwise. Adapters call it (after
// fence.CheckGrant, which makes the same check) immediately before COMMIT, so that a
// fenced transaction whose grant is known lost by the time fn returns rolls back
// instead of committing, and before every request of a write that makes several.
func CheckLost(g fence.Grant) error {
	if c, ok := g.(*Checked); ok {
		select {
		case <-c.done: // a nil channel never is
			return Lost(c.resource, c.token)
		default:
			return nil
		}
	}
	w, ok := g.(fence.Watched)
	if !ok || IsNil(g) {
		return nil
	}
	if d := w.Done(); d != nil {
		select {
		case <-d:
			return Lost(g.Resource(), g.Token())
		default:
		}
	}
	return nil
}

// Lost returns fence.ErrLost for the lock of resource at token, naming them.
func Lost(resource string, token fence.Token) error {
	return fmt.Errorf("%w: %q at token %d", fence.ErrLost, resource, token)
}

// CommitUnknown returns fence.ErrCommitUnknown for op (COMMIT, or a single-row
// write's one statement) under g whose reply was lost, wrapping the driver's err.
func CommitUnknown(g fence.Grant, op string, err error) error {
	if err == nil {
		return fmt.Errorf("%w: %s for %q at token %d", fence.ErrCommitUnknown, op, g.Resource(), g.Token())
	}
	return fmt.Errorf("%w: %s for %q at token %d: %w", fence.ErrCommitUnknown, op, g.Resource(), g.Token(), err)
}

// CheckSingle is fence.CheckGrant for a write that fences exactly one resource (the
// adapters' single-row Update, Upsert and Delete, an s3fence object write): it also
// refuses, with fence.ErrInvalidArgument and before any I/O, a fence.Set of more
// than one resource, rather than fence one resource of the set. A Set of one
// resource is that resource's grant.
func CheckSingle(g fence.Grant) error {
	_, err := CheckOne(g)
	return err
}

// CheckOne is Check for a write that fences one resource (see CheckSingle).
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

// Resources returns the resources g fences, sorted (byte order) and each once: a
// fence.Set's Resources, or g.Resource() alone. Adapters raise the marks in this
// order, so that two transactions over overlapping sets lock their fence rows in the
// same order.
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

// Multi reports whether g fences more than one resource: a fence.Set naming two or
// more. Every *lockclient.Lock is a fence.Set; one on a single name takes the
// single-resource path (one raise of g.Resource()).
func Multi(g fence.Grant) bool {
	if c, ok := g.(*Checked); ok {
		return len(c.resources) > 1
	}
	set, ok := g.(fence.Set)
	if !ok {
		return false
	}
	res := set.Resources()
	if len(res) < 2 {
		return false
	}
	return len(Resources(g)) > 1
}

// IsNil reports whether v is nil or holds a nil pointer, map, slice, channel or
// function: a typed nil that satisfies an interface but whose methods would
// dereference it.
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
	// Refused returns the fence's refusal if one happened while fn ran (a raise
	// that travelled with fn's first statement), or nil.
	Refused() error
	// Commit commits and returns the adapter's error for a failed commit (a
	// fence.ErrCommitUnknown when its reply was lost).
	Commit() error
	// Rollback ends the transaction if it is still open; it must be safe to call
	// after a failed Commit.
	Rollback()
}

// RunTx calls fn, then commits tx unless fn failed, the fence refused (even if fn
// swallowed the refusal), or g's Done channel has closed (fence.ErrLost: the grant
// is known lost, so nothing commits). Every error and every panic rolls tx back; a
// panic then goes on. When fn fails after swallowing a refusal, both errors are
// returned, joined.
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
