package fence

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/internal/core/nilness"
)

// Store is what an adapter gives Exec: a database that can run a function inside a
// transaction fenced for a grant. Tx is the adapter's transaction type (pgx.Tx,
// *sql.Tx), so the function passed to Exec needs no casts.
type Store[Tx any] interface {
	// Fenced begins a transaction, raises the resource's stored high-water token to
	// g.Token() (refusing with a *StaleError if a higher one is stored), runs fn and
	// commits. Any error from fn, and any refusal, rolls the whole transaction back;
	// a refused transaction writes nothing. Once raised, the fence row stays locked
	// until commit: a transaction with another token that reaches it meanwhile waits,
	// and is then refused if its token is lower. When the fence is raised is the
	// adapter's documented choice: before fn runs (sqlfence; pgxfence
	// WithFenceFirst), or, by default in pgxfence, together with fn's first
	// statement, which then never runs for a stale grant. In that default mode fn
	// holds nothing before its first statement: work fn does outside the database
	// before it runs even for a stale grant, and a stale transaction whose first
	// statement reaches the fence row before a newer one's commits first (tokens
	// still rise in commit order; the newer one then raises past it). When COMMIT was
	// sent but its reply was lost (the connection broke or closed, the session was
	// terminated, ctx ended mid-commit), Fenced returns ErrCommitUnknown, also
	// wrapping the driver's error: the transaction may
	// or may not have committed, and it is never retried. A Watched grant whose
	// Done channel has closed by the time fn returns is not committed: Fenced rolls
	// back and returns ErrLost.
	Fenced(ctx context.Context, g Grant, fn func(Tx) error) error
}

// Exec runs fn inside a transaction of s fenced for g: fn's writes commit only if no
// higher token than g.Token() has been stored for g.Resource(), and then the stored
// token becomes g.Token(). ctx governs the whole transaction.
//
// A nil store (a nil interface or a typed nil pointer), a nil fn, or a grant that is
// nil (typed nil included), has a bad resource or a token <= 0 is refused with
// ErrInvalidArgument, and a Watched grant
// whose Done channel is closed with ErrLost, all before any I/O. A newer holder's
// token returns a *StaleError (errors.Is(err, ErrStale)): stop, do not retry. An error
// from fn is returned as is, after rollback.
func Exec[Tx any](ctx context.Context, s Store[Tx], g Grant, fn func(Tx) error) error {
	if nilness.IsNil(s) {
		return fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	if err := CheckGrant(g); err != nil {
		return err
	}
	return s.Fenced(ctx, g, fn)
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
