package observe_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/observe"
)

type recorder []string

func (r *recorder) FencedWrite(adapter, op string, err error) {
	*r = append(*r, adapter+" "+op+" "+observe.Result(err))
}

func TestWrite(t *testing.T) {
	stale := fmt.Errorf("update: %w", &fence.StaleError{Resource: "acct", Presented: 4, Seen: 5})
	tests := []struct {
		name    string
		dialect string
		g       fence.Grant
		err     error
		seen    string
		log     string // "" when nothing is logged
	}{
		{"accepted", "", fence.NewGrant("acct", 4), nil, "a update accepted", ""},
		{"failed", "", fence.NewGrant("acct", 4), errors.New("boom"), "a update error", ""},
		{"stale", "", fence.NewGrant("acct", 4), stale, "a update stale",
			`"adapter":"a","op":"update","resource":"acct","token":4,"result":"stale","stored_token":5}`},
		{"stale with dialect", "mysql", fence.NewGrant("acct", 4), stale, "a update stale",
			`"adapter":"a","dialect":"mysql","op":"update","resource":"acct","token":4,"result":"stale","stored_token":5}`},
		{"lost", "", fence.NewGrant("acct", 9), fence.ErrLost, "a update lost",
			`"adapter":"a","op":"update","resource":"acct","token":9,"result":"lost"}`},
		{"no grant", "", nil, fence.ErrLost, "a update lost", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			var logs bytes.Buffer
			k := observe.Sink{Adapter: "a", Dialect: tt.dialect, Obs: &rec, Log: slog.New(slog.NewJSONHandler(&logs, nil))}
			observe.Write(t.Context(), k, "update", tt.g, tt.err)
			if len(rec) != 1 || rec[0] != tt.seen {
				t.Errorf("observed %q, want %q", rec, tt.seen)
			}
			got := strings.TrimSpace(logs.String())
			switch {
			case tt.log == "" && got != "":
				t.Errorf("logged %s, want nothing", got)
			case tt.log != "" && (!strings.Contains(got, `"level":"WARN","msg":"fenced write refused"`) || !strings.HasSuffix(got, tt.log)):
				t.Errorf("logged %s, want a Warn ending %s", got, tt.log)
			}
		})
	}
}

func TestWrite_nilSinks(t *testing.T) {
	// Neither an observer nor a logger: nothing to do, and nothing may panic.
	observe.Write(t.Context(), observe.Sink{Adapter: "a"}, "update", fence.NewGrant("acct", 1), fence.ErrLost)
	var logs bytes.Buffer
	observe.Write(t.Context(), observe.Sink{Adapter: "a", Log: slog.New(slog.NewJSONHandler(&logs, nil))}, "update", fence.NewGrant("acct", 1), fence.ErrLost)
	if logs.Len() == 0 {
		t.Fatal("a refused write with a logger and no observer was not logged")
	}
}

// TestResult pins the label values lockmetrics exports.
func TestResult(t *testing.T) {
	for err, want := range map[error]string{
		nil: "accepted",
		fmt.Errorf("x: %w", &fence.StaleError{Resource: "r", Presented: 1, Seen: 2}):             "stale",
		&fence.LostError{Resource: "r", Token: 1}:                                                "lost",
		&fence.CommitUnknownError{Resource: "r", Token: 1, Op: "commit", Err: errors.New("eof")}: "commit_unknown",
		errors.New("boom"): "error",
	} {
		if got := observe.Result(err); got != want {
			t.Errorf("Result(%v) = %q, want %q", err, got, want)
		}
	}
}
