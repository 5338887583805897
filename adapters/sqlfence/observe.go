package sqlfence

import (
	"context"
	"log/slog"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/observe"
)

// WithLogger makes the Store log every refused fenced write (Fenced, Update,
// Upsert, Delete refused as stale or lost) at Warn, with slog attributes: the
// resource, the token presented and the higher token stored. A nil l, the
// default, logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) error {
		s.log = l
		return nil
	}
}

// WithObserver makes the Store report the result of every fenced write
// (Fenced, Update, Upsert, Delete) to obs, with adapter "sqlfence"; the
// lockmetrics package counts them. A nil obs, the default, reports nothing.
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error {
		s.obs = obs
		return nil
	}
}

// observe reports a fenced write's result; deferred by each fenced method.
func (s *Store) observe(ctx context.Context, op string, g fence.Grant, errp *error) {
	if s == nil || (s.obs == nil && s.log == nil) {
		return
	}
	observe.Write(ctx, observe.Sink{
		Adapter: "sqlfence",
		Dialect: s.d.String(),
		Obs:     s.obs,
		Log:     s.log,
	}, op, g, *errp)
}
