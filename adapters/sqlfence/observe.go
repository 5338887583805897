package sqlfence

import "github.com/fencegate/fencegate/fence"

// WithObserver makes the Store report the result of every fenced write
// (Fenced, Update, Upsert, Delete) to obs, with adapter "sqlfence": the lockmetrics
// package counts them, and an observer of the program's own can log the refusals
// (errors.Is fence.ErrStale or fence.ErrLost; a *fence.StaleError names the
// resource, the token presented and the one stored). A nil obs, the default,
// reports nothing.
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error {
		s.obs = obs
		return nil
	}
}

// observe reports a fenced write's result; deferred by each fenced method.
func (s *Store) observe(op string, errp *error) {
	if s != nil && s.obs != nil {
		s.obs.FencedWrite("sqlfence", op, *errp)
	}
}
