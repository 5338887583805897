package scenario_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/scenario"
)

// TestRun_killAfter kills a worker at a time rather than at a point: a job that
// holds its lock until its context ends is killed a moment after b starts (once a
// holds the lock), and b takes the lock once a's lease expires.
func TestRun_killAfter(t *testing.T) {
	t.Parallel() // a run mostly waits out a lease
	h := scenario.Run(t, scenario.Config{
		Workers: []string{"a", "b"},
		Job: func(ctx context.Context, w *scenario.Worker) error {
			l, err := w.Acquire(ctx, "job-1")
			if err != nil {
				return err
			}
			if w.Name() == "a" {
				<-ctx.Done() // holds the lock until killed
			}
			return l.Release(ctx)
		},
		Read: func(context.Context, string) (map[string]string, error) { return nil, nil },
	},
		scenario.Start("a"),
		scenario.Start("b").When("a", scenario.Granted),
		scenario.Kill("a").After(500*time.Millisecond),
	)
	tl := h.Timelines()
	if len(h.Grants) != 2 || h.Grants[0].Worker != "a" || h.Grants[1].Worker != "b" || !strings.Contains(tl, "killed") {
		t.Fatalf("grants %+v; want a's then b's, with a killed:\n%s", h.Grants, tl)
	}
}
