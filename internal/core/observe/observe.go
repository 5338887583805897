// Package observe reports the adapters' fenced writes: every result to a
// fence.WriteObserver (metrics), and every write refused as stale or lost as one
// Warn line to a slog.Logger. pgxfence and sqlfence share it so that their metric
// labels and log attributes stay the same.
package observe

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fencegate/fencegate/fence"
)

// Sink is where one adapter's Store reports its fenced writes.
type Sink struct {
	Adapter string              // "pgxfence", "sqlfence": the observer's adapter and the log's
	Dialect string              // logged after the adapter when not ""
	Obs     fence.WriteObserver // every result; nil: none
	Log     *slog.Logger        // refused writes; nil: silent
}

// Write reports the fenced write op (fenced, update, upsert, delete) made under g
// that returned err. A refusal is logged with the attributes adapter, dialect
// (when set), op, resource, token, result and, for a stale write, stored_token;
// with no grant there is nothing to name, so nothing is logged.
func Write(ctx context.Context, k Sink, op string, g fence.Grant, err error) {
	if k.Obs == nil && k.Log == nil {
		return
	}
	if k.Obs != nil {
		k.Obs.FencedWrite(k.Adapter, op, err)
	}
	res := Result(err)
	if k.Log == nil || (res != "stale" && res != "lost") || g == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("adapter", k.Adapter))
	if k.Dialect != "" {
		attrs = append(attrs, slog.String("dialect", k.Dialect))
	}
	attrs = append(attrs,
		slog.String("op", op),
		slog.String("resource", g.Resource()),
		slog.Int64("token", int64(g.Token())),
		slog.String("result", res),
	)
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		attrs = append(attrs, slog.Int64("stored_token", int64(stale.Seen)))
	}
	k.Log.LogAttrs(ctx, slog.LevelWarn, "fenced write refused", attrs...)
}

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
