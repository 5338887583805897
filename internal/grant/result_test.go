package grant_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

// TestResult pins the label values lockmetrics exports.
func TestResult(t *testing.T) {
	for err, want := range map[error]string{
		nil: "accepted",
		fmt.Errorf("x: %w", &fence.StaleError{Resource: "r", Presented: 1, Seen: 2}): "stale",
		grant.Lost("r", 1): "lost",
		grant.CommitUnknown(fence.NewGrant("r", 1), "commit", errors.New("eof")): "commit_unknown",
		errors.New("boom"): "error",
	} {
		if got := grant.WriteResult(err); got != want {
			t.Errorf("WriteResult(%v) = %q, want %q", err, got, want)
		}
	}
}
