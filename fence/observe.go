package fence

// WriteObserver is told how every fenced write an adapter makes ended, for metrics.
// adapter names the adapter ("pgxfence", "sqlfence"), op the method ("fenced",
// "update", "upsert", "delete"), and err is what the write returned: nil when it was
// made, else match it with errors.Is (ErrStale, ErrLost, ErrCommitUnknown, ...). It
// is called synchronously after the write, possibly concurrently: it must be cheap
// and must not block.
type WriteObserver interface {
	FencedWrite(adapter, op string, err error)
}
