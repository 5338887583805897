package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
)

// ctxGrant is a Watched grant with a Context, as *lockclient.Lock is.
type ctxGrant struct {
	fence.Grant
	ctx context.Context
}

func (g ctxGrant) Done() <-chan struct{}    { return g.ctx.Done() }
func (g ctxGrant) Context() context.Context { return g.ctx }

// TestCheckLost_cause: a lost grant's error says why its Context ended, when it says.
func TestCheckLost_cause(t *testing.T) {
	released := errors.New("lockclient: lock released")
	ownLost := errors.Join(errors.New(`fence: lock lost: "a" at token 3: not renewed`), fence.ErrLost)
	tests := []struct {
		name  string
		cause error // nil: cancelled without one
		want  string
	}{
		{"no cause", nil, `fence: lock lost: "a" at token 3`},
		{"released", released, `fence: lock lost: "a" at token 3: lockclient: lock released`},
		{"a lost error of its own", ownLost, ownLost.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(t.Context())
			cancel(tt.cause)
			g := ctxGrant{fence.NewGrant("a", 3), ctx}
			for _, err := range []error{fence.CheckLost(g), fence.CheckGrant(g),
				fence.Exec(t.Context(), &recordingStore{}, g, func(int) error { return nil })} {
				if !errors.Is(err, fence.ErrLost) || err.Error() != tt.want || tt.cause != nil && !errors.Is(err, tt.cause) {
					t.Errorf("err = %v, want ErrLost saying %q", err, tt.want)
				}
			}
		})
	}
}
