package fence

import (
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/fencegate/fencegate/internal/grantread"
	"github.com/fencegate/fencegate/internal/typednil"
)

// Token is a fencing token: a number that only goes up across the grants of one
// resource. Every grant of a lock carries one, and a database that has seen token n
// refuses a write that presents a lower one. Valid tokens are > 0; 0 means "no token".
type Token int64

// Grant is what a protected write presents: the resource it writes on behalf of and
// the fencing token of the lock grant that allowed it. *lockclient.Lock satisfies it.
type Grant interface {
	// Resource names the lock, such as "account-42". The database keeps one
	// high-water token per resource.
	Resource() string
	// Token is the grant's fencing token.
	Token() Token
}

// Set is implemented by a grant that covers several resources under one token, such as
// a lock taken on a set of names all-or-nothing (every key created in one etcd Txn has
// the same create revision). Resources returns every resource of the set, each once;
// Resource returns one of them. Fenced transactions (and Exec) raise every resource's
// high-water mark, in sorted order (see Resources), and refuse with a *StaleError
// naming the first resource that holds a higher token, writing nothing. The adapters'
// single-row writes (Update, Upsert, Delete) refuse a Set of more than one resource
// with ErrInvalidArgument before any I/O, rather than fence one resource of it.
type Set interface {
	Grant
	Resources() []string
}

// Watched is implemented by grants that know when they are lost (*lockclient.Lock
// does). Exec refuses a grant whose Done channel is already closed before any I/O,
// and a fenced transaction whose grant's Done channel has closed by the time fn
// returns is rolled back with ErrLost instead of committed.
type Watched interface {
	Done() <-chan struct{}
}

// NewGrant returns a Grant for a resource and a token the caller kept, for writes
// made by a process that learned the token from elsewhere (a job queue, a log line).
// It is not checked here; Exec and the adapters check every grant they are given.
func NewGrant(resource string, token Token) Grant {
	return staticGrant{resource: resource, token: token}
}

type staticGrant struct {
	resource string
	token    Token
}

func (g staticGrant) Resource() string { return g.resource }
func (g staticGrant) Token() Token     { return g.token }

// maxResourceLen is the longest resource name, in bytes: the width of the resource
// column in the fence_tokens table.
const maxResourceLen = 200

// CheckGrant reports why g cannot be presented, or nil when it can. It returns an error
// wrapping ErrInvalidArgument, naming the problem, for a nil grant (a nil interface,
// or a nil pointer of a grant type, such as the *lockclient.Lock a failed Acquire
// leaves), a resource CheckResource refuses (for a Set, any of its resources), a Set
// with no resources, or a token <= 0; and ErrLost (see CheckLost) when g is a Watched
// grant whose Done channel is closed. Adapters call it before any I/O. It calls each
// of g's methods once; the grant Exec hands a Store is checked already, and only its
// loss is looked at again.
func CheckGrant(g Grant) error {
	_, err := check(g)
	return err
}

// check is the one check of a grant: g read once (grantread.Read), then what it
// returned checked. Exec hands the result to the Store, whose adapter takes it as it is.
func check(g Grant) (*grantread.Grant[Token], error) {
	if typednil.Is(g) {
		return nil, errNilGrant
	}
	c, fresh := grantread.Read[Token](g)
	if fresh {
		if err := checkRead(c); err != nil {
			return nil, err
		}
		c.MarkChecked()
	}
	if err := c.Lost(ErrLost); err != nil {
		return nil, err
	}
	return c, nil
}

// checkRead checks a grant's values as read: its resources and its token.
func checkRead(c *grantread.Grant[Token]) error {
	if err := CheckResource(c.Resource()); err != nil {
		return err
	}
	if len(c.Resources()) == 0 {
		return fmt.Errorf("%w: a grant set with no resources", ErrInvalidArgument)
	}
	for _, r := range c.Resources() {
		if err := CheckResource(r); err != nil {
			return err
		}
	}
	if t := c.Token(); t <= 0 {
		return fmt.Errorf("fence: invalid token %d for %q: tokens are > 0: %w", t, c.Resource(), ErrInvalidArgument)
	}
	return nil
}

// CheckLost returns an error wrapping ErrLost when g is a Watched grant whose Done
// channel has closed, and nil otherwise. The error names g's resource and token and,
// when g has a Context() context.Context (as *lockclient.Lock has) cancelled with a
// cause, that cause: lockclient's ErrReleased after Release, ErrClosed after the
// Client's Close, or why the lock was lost. An adapter calls it last before it
// commits, as CheckGrant does at the door.
func CheckLost(g Grant) error {
	if c, ok := g.(*grantread.Grant[Token]); ok && c != nil {
		return c.Lost(ErrLost)
	}
	w, ok := g.(Watched)
	if !ok || typednil.Is(g) {
		return nil
	}
	if d := w.Done(); d != nil {
		select {
		case <-d:
			var ctx context.Context
			if x, ok := g.(interface{ Context() context.Context }); ok {
				ctx = x.Context()
			}
			return grantread.LostError(ErrLost, g.Resource(), g.Token(), ctx)
		default:
		}
	}
	return nil
}

// Resources returns the resources g fences, sorted and each once: a Set's Resources,
// else g's Resource alone. Adapters raise their marks in this order, so two fenced
// writes on overlapping sets take them in the same order. A nil grant (or an
// interface holding a nil pointer) has none. Check g with CheckGrant first.
func Resources(g Grant) []string {
	if typednil.Is(g) {
		return nil
	}
	set, ok := g.(Set)
	if !ok {
		return []string{g.Resource()}
	}
	res := slices.Clone(set.Resources())
	slices.Sort(res)
	return slices.Compact(res)
}

var errNilGrant = fmt.Errorf("%w: nil grant", ErrInvalidArgument)

// CheckResource reports why name cannot be a resource (an error wrapping
// ErrInvalidArgument), or nil. Resources are non-empty UTF-8 of at most
// 200 bytes (the width of the resource column in the fence_tokens table) without
// NUL bytes.
func CheckResource(name string) error {
	switch {
	case name == "":
		return invalidResource("empty resource name")
	case len(name) > maxResourceLen:
		return invalidResource("resource name is %d bytes, the limit is %d", len(name), maxResourceLen)
	case !utf8.ValidString(name):
		return invalidResource("resource name %q is not UTF-8", name)
	}
	for _, r := range name {
		if r == 0 {
			return invalidResource("resource name %q contains a NUL byte", name)
		}
	}
	return nil
}

// invalidResource returns an error wrapping ErrInvalidArgument that says why a
// resource name is refused.
func invalidResource(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf("fence: invalid resource: "+format, args...)}
}

// invalidError is ErrInvalidArgument with a message that already says what is
// invalid: it matches the sentinel without repeating the sentinel's text, so a chain
// of wrappers reads "x: lock name: fence: invalid resource: why" once.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalidArgument }
