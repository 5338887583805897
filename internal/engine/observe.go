package engine

import (
	"errors"

	"github.com/fencegate/fencegate/fence"
)

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
