package pgxfence

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fencegate/fencegate/fence"
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
// (Fenced, Update, Upsert, Delete) to obs, with adapter "pgxfence"; the
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
	res := fence.WriteResultOf(*errp)
	if s.obs != nil {
		s.obs.FencedWrite("pgxfence", op, res)
	}
	if s.log == nil || (res != fence.WriteStale && res != fence.WriteLost) || g == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("adapter", "pgxfence"),
		slog.String("op", op),
		slog.String("resource", g.Resource()),
		slog.Int64("token", int64(g.Token())),
		slog.String("result", res.String()),
	}
	var stale *fence.StaleError
	if errors.As(*errp, &stale) {
		attrs = append(attrs, slog.Int64("stored_token", int64(stale.Seen)))
	}
	s.log.LogAttrs(ctx, slog.LevelWarn, "fenced write refused", attrs...)
}
