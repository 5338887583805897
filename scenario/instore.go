package scenario

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/fencegate/fencegate/fence"
)

// Store wraps s so that every fenced transaction through it is recorded as
// Worker.Write would, its value the grant's token in decimal: the job's own code
// runs unchanged on the returned Store. Config.Read must then return, for each
// resource, the token its stored data was last written with (a token column the
// job writes; not fence_tokens, which a write without a grant leaves alone).
//
// Each transaction checks the grant as the adapters do (fence.CheckGrant: a lock
// already lost is refused here, as fence.ErrLost) and then reaches InStore. From
// there on the store alone decides: s gets a snapshot of the grant (its resources
// and token, without the lock's Done channel or lease), so a worker frozen at
// InStore past its lease sends its write with the old token when it wakes, as a
// process paused between its last check and its statement does, and a fenced store
// refuses it as stale. A store with no fence lets it land.
func Store[Tx any](w *Worker, s fence.Store[Tx]) fence.Store[Tx] {
	return recorded[Tx]{w: w, s: s}
}

type recorded[Tx any] struct {
	w *Worker
	s fence.Store[Tx]
}

func (r recorded[Tx]) Fenced(ctx context.Context, g fence.Grant, fn func(Tx) error) error {
	if err := fence.CheckGrant(g); errors.Is(err, fence.ErrInvalidArgument) {
		return r.s.Fenced(ctx, g, fn) // not a write: the store refuses it as bad input
	}
	value := strconv.FormatInt(int64(g.Token()), 10)
	return r.w.Write(ctx, g, value, func(ctx context.Context) error {
		if err := fence.CheckGrant(g); err != nil {
			return err
		}
		snap := snapshot(g)
		if err := r.w.Reach(ctx, InStore); err != nil {
			return err
		}
		return r.s.Fenced(ctx, snap, fn)
	})
}

// snapshot is g as it was when checked: its token and resources, nothing that
// could tell the adapter the lock has since been lost.
func snapshot(g fence.Grant) fence.Grant {
	if set, ok := g.(fence.Set); ok {
		return grantSet{Grant: fence.NewGrant(g.Resource(), g.Token()), resources: slices.Clone(set.Resources())}
	}
	return fence.NewGrant(g.Resource(), g.Token())
}

type grantSet struct {
	fence.Grant
	resources []string
}

func (s grantSet) Resources() []string { return s.resources }
