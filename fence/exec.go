package fence

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/internal/typednil"
)

// Store is what an adapter gives Exec: a database that can run a function inside a
// transaction fenced for a grant. Tx is the adapter's transaction type (pgx.Tx,
// *sql.Tx), so the function passed to Exec needs no casts.
type Store[Tx any] interface {
	// Fenced begins a transaction, raises the stored token of g's resources to
	// g.Token() (refusing with a *StaleError if a higher one is stored), runs fn and
	// commits. The package doc states the whole contract: when the fence is raised,
	// what is refused, and the errors. From Exec, g is the caller's grant as
	// CheckGrant read and checked it: a Set, Leased and Watched grant whose methods
	// return what the caller's did then (Lease 0 and Done nil where it had none), with
	// its Context when it had one.
	Fenced(ctx context.Context, g Grant, fn func(Tx) error) error
}

// Exec runs fn inside a transaction of s fenced for g: fn's writes commit only if no
// higher token than g.Token() has been stored for g.Resource(), and then the stored
// token becomes g.Token(). ctx governs the whole transaction.
//
// A nil store (a nil interface or a typed nil pointer), a nil fn, or a grant that is
// nil (typed nil included), has a bad resource or a token <= 0 is refused with
// ErrInvalidArgument, and a Watched grant
// whose Done channel is closed with ErrLost (see CheckLost), all before any I/O. A
// newer holder's token returns a *StaleError (errors.Is(err, ErrStale)): stop, do not
// retry. An error from fn is returned as is, after rollback.
//
// The grant is checked here, once (CheckGrant: each of its methods called once), and
// handed to s as read: the adapters do not ask the caller's grant again.
func Exec[Tx any](ctx context.Context, s Store[Tx], g Grant, fn func(Tx) error) error {
	if typednil.Is(s) {
		return fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	c, err := check(g)
	if err != nil {
		return err
	}
	return s.Fenced(ctx, c, fn)
}

// Col is a column name and a value, for the adapters' single-row builders. The name is
// quoted by the driver's own quoting; the value is always sent as a parameter.
type Col struct {
	Name  string
	Value any
}

// DefaultTokenColumn is the column a token-column write uses when Row.TokenColumn is
// empty. The migrations package's generator adds it to a table.
const DefaultTokenColumn = "fence_token"

// Row names one row of a table that carries a token column, for the classic one
// statement fenced write: UPDATE t SET ..., fence_token = $t WHERE key AND
// fence_token <= $t.
type Row struct {
	Table       string // table name, optionally schema-qualified as "schema.table"
	Key         []Col  // columns and values that pick exactly one row (a primary or unique key)
	TokenColumn string // the token column; DefaultTokenColumn when empty
}
