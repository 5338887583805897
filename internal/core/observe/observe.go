// Package observe classifies the result of a fenced write for the labels of
// fencegate's write metrics, shared by lockmetrics and the adapters' tests so that
// the label values stay the same.
package observe

import (
	"errors"

	"github.com/fencegate/fencegate/fence"
)

// Result classifies the error a fenced write returned, for metric labels and logs:
// "accepted" (nil), "stale" (fence.ErrStale), "lost" (fence.ErrLost),
// "commit_unknown" (fence.ErrCommitUnknown) or "error" (anything else).
func Result(err error) string {
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
