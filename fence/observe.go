package fence

import "errors"

// WriteResult is how a fenced write (an adapter's Fenced, Update, Upsert or
// Delete) ended, for metrics and logs.
type WriteResult int

const (
	// WriteAccepted: the write was made (committed).
	WriteAccepted WriteResult = iota + 1
	// WriteStale: the database refused it; a higher token is stored.
	WriteStale
	// WriteLost: refused before it was sent; the grant's lock is known lost.
	WriteLost
	// WriteFailed: another error (bad input, the database's error, the caller's
	// function failed).
	WriteFailed
	// WriteUnknown: the reply to COMMIT (or to a single-row write's one statement)
	// was lost; the write may or may not have landed (ErrCommitUnknown).
	WriteUnknown
)

// String returns "accepted", "stale", "lost", "error" or "commit_unknown": metric
// label values.
func (r WriteResult) String() string {
	switch r {
	case WriteAccepted:
		return "accepted"
	case WriteStale:
		return "stale"
	case WriteLost:
		return "lost"
	case WriteFailed:
		return "error"
	case WriteUnknown:
		return "commit_unknown"
	}
	return "unknown"
}

// WriteResultOf classifies the error a fenced write returned.
func WriteResultOf(err error) WriteResult {
	switch {
	case err == nil:
		return WriteAccepted
	case errors.Is(err, ErrStale):
		return WriteStale
	case errors.Is(err, ErrLost):
		return WriteLost
	case errors.Is(err, ErrCommitUnknown):
		return WriteUnknown
	}
	return WriteFailed
}

// WriteObserver is told the result of every fenced write an adapter makes, for
// metrics. adapter names the adapter ("pgxfence", "sqlfence"), op the method
// ("fenced", "update", "upsert", "delete"). It is called synchronously after
// the write, possibly concurrently: it must be cheap and must not block.
type WriteObserver interface {
	FencedWrite(adapter, op string, result WriteResult)
}
