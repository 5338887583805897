package fence

import (
	"context"
	"fmt"
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
	// terminated, ctx ended mid-commit), Fenced returns a *CommitUnknownError
	// (errors.Is ErrCommitUnknown) wrapping the driver's error: the transaction may
	// or may not have committed, and it is never retried. A Watched grant whose
	// Done channel has closed by the time fn returns is not committed: Fenced rolls
	// back and returns a *LostError (ErrLost).
	Fenced(ctx context.Context, g Grant, fn func(Tx) error) error
}

// Exec runs fn inside a transaction of s fenced for g: fn's writes commit only if no
// higher token than g.Token() has been stored for g.Resource(), and then the stored
// token becomes g.Token(). ctx governs the whole transaction.
//
// A nil store (a nil interface or a typed nil pointer), a nil fn, or a grant that is
// nil (typed nil included), has an empty resource or a token <= 0 is refused with
// ErrInvalidArgument, ErrInvalidResource or ErrInvalidToken, and a Watched grant
// whose Done channel is closed with ErrLost, all before any I/O. A newer holder's
// token returns a *StaleError (errors.Is(err, ErrStale)): stop, do not retry. An error
// from fn is returned as is, after rollback.
func Exec[Tx any](ctx context.Context, s Store[Tx], g Grant, fn func(Tx) error) error {
	if IsNil(s) {
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

// C returns Col{name, value}.
func C(name string, value any) Col { return Col{Name: name, Value: value} }

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

// RowWriter is implemented by every adapter's Store: fenced single-row writes on a
// table with a token column. They share one high-water mark per resource with Store's
// fenced transactions (the resource's fence_tokens row): every form refuses a token
// lower than the highest any form stored for the resource, on any row, and stores its
// own as the mark. Each write also checks and stores the row's own token column. When
// a write changes no row the adapter looks once more to tell a *StaleError (with the
// higher stored token) from ErrNotFound. A Set grant is refused with
// ErrInvalidArgument before any I/O (see CheckSingle). A write whose durable step was sent but whose reply was lost (its
// autocommit statement, or the COMMIT of the adapter's own transaction) returns a
// *CommitUnknownError (ErrCommitUnknown), exactly as a fenced transaction does: it may
// have landed, and it is never retried. On a caller's transaction (pgxfence on a
// pgx.Tx) nothing is durable before the caller commits, so a lost reply there is the
// driver's error.
type RowWriter interface {
	// Update sets cols on the row if neither the row nor the resource's mark holds a
	// token > g.Token(), storing g.Token() in both. It returns a *StaleError or
	// ErrNotFound when it changed nothing.
	Update(ctx context.Context, g Grant, r Row, set ...Col) error
	// Upsert inserts the row, or updates it as Update does. A row deleted by a newer
	// token is not re-inserted by an older one: that returns a *StaleError.
	Upsert(ctx context.Context, g Grant, r Row, set ...Col) error
	// Delete removes the row if its stored token is <= g.Token(), and remembers
	// g.Token() so that a stale Upsert cannot bring the row back.
	Delete(ctx context.Context, g Grant, r Row) error
}

// Counter names one integer column of one row, for guarded decrements on the no-lock
// path: UPDATE t SET left = left - n WHERE key AND left >= n.
type Counter struct {
	Table  string
	Key    []Col
	Column string
}

// Guard is implemented by every adapter's Store: the no-lock path, where one row
// decides and the database settles the race in one statement.
type Guard interface {
	// Decrement takes n (> 0) from the counter only if at least n is left and
	// returns what is left. It returns an *InsufficientError (ErrInsufficient) when
	// not enough is left and ErrNotFound when there is no such row.
	Decrement(ctx context.Context, c Counter, n int64) (left int64, err error)
	// Insert inserts one row; a unique-key violation returns a *DuplicateError
	// (ErrDuplicate) naming the constraint where the database does.
	Insert(ctx context.Context, table string, cols ...Col) error
}
