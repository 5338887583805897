package scenario_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/scenario"
)

// totalsPG is the totals job on the shared PostgreSQL.
var totalsPG = totalsDBs[1]

// TestRun_killLeaderCrashStore: a freezes at InStore; etcd's leader is killed
// while a's lease runs out; b takes the lock and writes; PostgreSQL crashes
// right after b's write is acknowledged and restarts; a wakes and sends its
// write. The fenced store still refuses it (b's mark survived the crash); a job
// that only checks its lock's context overwrites b's acknowledged write.
func TestRun_killLeaderCrashStore(t *testing.T) {
	steps := []*scenario.Step{
		scenario.Start("a"),
		scenario.Freeze("a").When("a", scenario.InStore).Until("b", scenario.Finished),
		scenario.KillEtcdLeader(),
		scenario.Start("b"),
		scenario.CrashStore().When("b", scenario.Wrote),
	}
	config := func(fenced bool) scenario.Config {
		c := totalsConfig(totalsPG, fenced)
		c.EtcdMembers, c.StoreServer = 3, postgres
		return c
	}
	t.Run("fenced", func(t *testing.T) {
		h := scenario.Run(t, config(true), steps...)
		if a := writeOf(t, h, "a"); a.Outcome != scenario.RefusedStale {
			t.Fatalf("a's write %+v: want refused stale by the restarted store", a)
		}
		for _, want := range []string{"(leader, term", "is leader, term", "restarted", "store: ", "crashed"} {
			if !strings.Contains(h.Timelines(), want) {
				t.Fatalf("no %q in the timelines:\n%s", want, h.Timelines())
			}
		}
	})
	t.Run("unfenced", func(t *testing.T) {
		h := scenario.Record(t, config(false), steps...)
		if err := h.Check(); !errors.Is(err, scenario.ErrViolation) {
			t.Fatalf("Check() = %v: want a's stale write over b's acknowledged one caught", err)
		}
	})
}

// TestRun_crashEtcdMember crashes a member of a 3-member etcd while a holds
// the lock and a is frozen at its write: b is granted the lock by the others,
// a's write is refused, and the member comes back (at b's end, or by default
// once the others have a leader).
func TestRun_crashEtcdMember(t *testing.T) {
	for _, c := range []struct {
		name  string
		crash *scenario.Step
	}{
		{"until", scenario.CrashEtcd(0).When("a", scenario.Granted).Until("b", scenario.Finished)},
		{"default", scenario.CrashEtcd(2).When("a", scenario.Granted)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a cluster of its own; the run mostly waits out a lease
			cfg := backends[0].config(false)
			cfg.EtcdMembers = 3
			h := scenario.Run(t, cfg,
				scenario.Start("a"),
				c.crash,
				scenario.Freeze("a").When("a", scenario.AboutToWrite).Until("b", scenario.Finished),
				scenario.Start("b"),
			)
			a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
			if b.Outcome != scenario.Acknowledged || a.Outcome == scenario.Acknowledged || a.Token >= b.Token {
				t.Fatalf("a's write %+v, b's %+v: want b's acknowledged and a's (lower token) refused", a, b)
			}
			if tl := h.Timelines(); !strings.Contains(tl, "killed") || !strings.Contains(tl, "restarted") {
				t.Fatalf("no crash and restart of a member in the timelines:\n%s", tl)
			}
		})
	}
}

// TestRun_cutOffStore cuts a off from PostgreSQL inside its transaction, until
// b has written: a's write is commit unknown (PostgreSQL rolls it back when
// the connection breaks), and b's lands.
func TestRun_cutOffStore(t *testing.T) {
	pg := backends[1]
	cfg := pg.config(false)
	cfg.StoreServer = postgres
	cfg.Job = func(ctx context.Context, w *scenario.Worker) error {
		dsn, err := w.StoreDSN(w.Data())
		if err != nil {
			return err
		}
		write, closeFn, err := pg.open(ctx, dsn, false)
		if err != nil {
			return err
		}
		defer closeFn()
		err = invoiceJob(ctx, w, "invoice-42", func(ctx context.Context, g fence.Grant, value string) error {
			return write(ctx, g, value, func() error { return w.Reach(ctx, "in transaction") })
		})
		if err != nil && w.Name() == "a" {
			return nil // cut off in its write: a job would retry; the history has it as commit unknown
		}
		return err
	}
	h := scenario.Run(t, cfg,
		scenario.Start("a"),
		scenario.CutOffStore("a").When("a", "in transaction").Until("b", scenario.Finished),
		scenario.Start("b"),
	)
	a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
	if a.Outcome != scenario.CommitUnknown || b.Outcome != scenario.Acknowledged || h.Final["invoice-42"] != b.Value {
		t.Fatalf("a's write %+v, b's %+v, final %v: want a's unknown (rolled back) and b's in the store", a, b, h.Final)
	}
	if !strings.Contains(h.Timelines(), "cut off from the store") {
		t.Fatalf("no cut in the timelines:\n%s", h.Timelines())
	}
}

// TestRun_crashEtcdFollower crashes a follower of a 3-member etcd while two
// workers take turns on a lock: the leader keeps leading at its term (the etcd
// timeline names both at the kill and after the restart), and the test logs the
// longest gap between grants.
func TestRun_crashEtcdFollower(t *testing.T) {
	h := scenario.Run(t, scenario.Config{
		Workers:     []string{"a", "b"},
		EtcdMembers: 3,
		Job: func(ctx context.Context, w *scenario.Worker) error {
			for start := time.Now(); time.Since(start) < 3*time.Second; {
				l, err := w.Acquire(ctx, "job")
				if err != nil {
					return err
				}
				// A release in flight to the member as it dies fails (Unavailable);
				// the lock client deletes the key later, and the gap shows it.
				_ = l.Release(ctx)
			}
			return nil
		},
		Read: func(context.Context, string) (map[string]string, error) { return nil, nil },
	}, scenario.CrashEtcdFollower().After(300*time.Millisecond))
	var killed, back *scenario.Event
	for i, e := range h.Events {
		switch {
		case e.Worker == "etcd" && strings.HasSuffix(e.What, " killed"):
			killed = &h.Events[i]
		case e.Worker == "etcd" && strings.Contains(e.What, " is leader, term "):
			back = &h.Events[i]
		}
	}
	var leader, term int
	if killed == nil || back == nil {
		t.Fatalf("no kill and leader in the etcd timeline:\n%s", h.Timelines())
	}
	if _, err := fmt.Sscanf(killed.What[strings.Index(killed.What, "follower; "):], "follower; member %d leads, term %d) killed", &leader, &term); err != nil ||
		back.What != fmt.Sprintf("member %d is leader, term %d", leader, term) {
		t.Fatalf("kill %q, then %q: want a follower killed and the same leader at the same term (%v)", killed.What, back.What, err)
	}
	gap, at := grantGap(h)
	t.Logf("longest gap between grants: %v (ending at %v; the kill at %v); %d grants", gap, at, killed.At, len(h.Grants))
}

// grantGap returns the longest time between two grants of the run, and when it
// ended.
func grantGap(h *scenario.History) (gap, at time.Duration) {
	var prev time.Duration = -1
	for _, e := range h.Events {
		if !strings.HasPrefix(e.What, "granted ") {
			continue
		}
		if prev >= 0 && e.At-prev > gap {
			gap, at = e.At-prev, e.At
		}
		prev = e.At
	}
	return gap, at
}
