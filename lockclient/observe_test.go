package lockclient_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu          sync.Mutex
	acquired    []string // "name result"
	ended       []string // "name reason"
	keepalives  int
	kaErrors    int
	sessions    int // Session calls with a nil error
	sessionLoss []int
	retried     []string // ops
}

var _ lockclient.Observer = (*recorder)(nil)

func (r *recorder) Session(locks int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.sessions++
	case errors.Is(err, lockclient.ErrSessionLost):
		r.sessionLoss = append(r.sessionLoss, locks)
	default:
		r.sessionLoss = append(r.sessionLoss, -1) // not a loss's error: no count matches
	}
}

func (r *recorder) sessionCounts() (started int, lost []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions, slices.Clone(r.sessionLoss)
}

func (r *recorder) Acquired(name string, wait time.Duration, err error) {
	res := "granted"
	switch {
	case errors.Is(err, lockclient.ErrHeld):
		res = "held_by_other"
	case err != nil:
		res = "error"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquired = append(r.acquired, name+" "+res)
}

func (r *recorder) Ended(name string, _ fence.Token, held time.Duration, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, name+" "+endLabel(cause))
}

// endLabel names an end cause as the Observer documents them.
func endLabel(cause error) string {
	switch {
	case errors.Is(cause, lockclient.ErrReleased):
		return "released"
	case errors.Is(cause, lockclient.ErrClosed):
		return "closed"
	case !errors.Is(cause, fence.ErrLost):
		return "unknown: " + cause.Error()
	case errors.Is(cause, lockclient.ErrSessionLost):
		return "lease_expired"
	case errors.Is(cause, lockclient.ErrNotRenewed):
		return "not_renewed"
	}
	return "key_deleted"
}

func (r *recorder) KeepAlive(rtt time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keepalives++
	if err != nil {
		r.kaErrors++
	}
}

func (r *recorder) Retried(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retried = append(r.retried, op)
}

func (r *recorder) TermBegun(string, fence.Token)                        {}
func (r *recorder) TermEnded(string, fence.Token, time.Duration, string) {}

func (r *recorder) snapshot() (acq, ended []string, ka int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.acquired), slices.Clone(r.ended), r.keepalives
}

// logBuffer collects JSON log records from concurrent goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.buf.String(), s)
}

func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// find returns the first record with msg and lock name.
func find(recs []map[string]any, msg, lock string) map[string]any {
	for _, r := range recs {
		if r["msg"] == msg && r["lock"] == lock {
			return r
		}
	}
	return nil
}

func TestClient_WithObserver_events(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	rec := &recorder{}
	var logs logBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newClient(t, srv.Client(t), lockclient.WithTTL(roomTTL), lockclient.WithObserver(rec), lockclient.WithLogger(log))
	other := newClient(t, srv.Client(t), lockclient.WithTTL(roomTTL))
	ctx := t.Context()

	// granted, then released
	l, err := c.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// held by another
	ol := mustAcquire(t, other, "b")
	if _, err := c.TryAcquire(ctx, "b"); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	// an error: a bad name
	if _, err := c.Acquire(ctx, "bad/name"); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "slash") {
		t.Fatalf("Acquire(bad/name): %v", err)
	}
	// a wait, then granted
	go func() {
		// Release only once c logged its wait, so the wait is certain.
		for !logs.contains(`"msg":"lock held, waiting"`) {
			time.Sleep(10 * time.Millisecond)
		}
		ol.Release(ctx)
	}()
	lb := mustAcquire(t, c, "b")
	// not renewed in time
	lm := mustAcquire(t, c, "m", lockclient.WithManualRenewal(testTTL))
	waitClosed(t, lm.Done(), "unrenewed lock's Done")
	// key deleted by someone else, found by Renew
	lk := mustAcquire(t, c, "k")
	if _, err := srv.Client(t).Delete(ctx, defaultPrefix+"k"); err != nil {
		t.Fatal(err)
	}
	if err := lk.Renew(ctx); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("Renew after the key was deleted: %v", err)
	}
	// closed
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, lb.Done(), "closed lock's Done")

	acq, ended, ka := rec.snapshot()
	wantAcq := []string{"a granted", "b held_by_other", "bad/name error", "b granted", "m granted", "k granted"}
	if !slices.Equal(acq, wantAcq) {
		t.Errorf("acquisitions %q, want %q", acq, wantAcq)
	}
	wantEnded := []string{"a released", "m not_renewed", "k key_deleted", "b closed"}
	if !slices.Equal(ended, wantEnded) {
		t.Errorf("ends %q, want %q", ended, wantEnded)
	}
	if ka == 0 {
		t.Errorf("no keepalive reported over a lock held past the renewal interval")
	}

	recs := logs.records(t)
	for _, tc := range []struct{ msg, lock, cause string }{
		{"lock granted", "a", ""},
		{"lock released", "a", "released"},
		{"lock held by another", "b", ""},
		{"lock held, waiting", "b", ""},
		{"lock lost", "m", "not_renewed"},
		{"lock lost", "k", "key_deleted"},
		{"lock released by close", "b", "closed"},
	} {
		r := find(recs, tc.msg, tc.lock)
		if r == nil {
			t.Errorf("no %q record for lock %q in %v", tc.msg, tc.lock, recs)
			continue
		}
		if tc.cause != "" && r["cause"] != tc.cause {
			t.Errorf("%q of %q: cause %v, want %q", tc.msg, tc.lock, r["cause"], tc.cause)
		}
		if tc.msg == "lock granted" {
			if tok, ok := r["token"].(float64); !ok || tok <= 0 {
				t.Errorf("grant record without a token: %v", r)
			}
		}
	}
}

func TestClient_WithObserver_sessionLost(t *testing.T) {
	cl := locktest.StartCluster(t, 1)
	rec := &recorder{}
	var logs logBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	c := newClient(t, cl.Client(t), lockclient.WithTTL(testTTL), lockclient.WithObserver(rec), lockclient.WithLogger(log))
	l := mustAcquire(t, c, "s")
	set, err := c.AcquireSet(t.Context(), []string{"t1", "t2", "t3"}) // one lock, three names
	if err != nil {
		t.Fatal(err)
	}
	cl.Stop(0) // no more confirmed renewals
	waitClosed(t, l.Done(), "lock's Done after the session deadline")
	waitClosed(t, set.Done(), "set's Done after the session deadline")
	// Done closes first; the observer and the log hear of the end right after.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, ended, _ := rec.snapshot()
		_, lost := rec.sessionCounts()
		if len(ended) > 0 && len(lost) > 0 && find(logs.records(t), "lock lost", "s") != nil && logs.contains("session lost") {
			break
		}
	}

	_, ended, _ := rec.snapshot()
	slices.Sort(ended)
	if !slices.Equal(ended, []string{"s lease_expired", "t1 lease_expired"}) {
		t.Errorf("ends %q, want [s lease_expired t1 lease_expired]", ended)
	}
	rec.mu.Lock()
	kaErrs := rec.kaErrors
	rec.mu.Unlock()
	recs := logs.records(t)
	if r := find(recs, "lock lost", "s"); r == nil || r["cause"] != "lease_expired" {
		t.Errorf("no lease_expired loss logged: %v", recs)
	}
	var sessionLost, kaFailed bool
	for _, r := range recs {
		if r["msg"] == "session lost" && r["locks_lost"] != 2.0 { // the set counts once
			t.Errorf("session lost logged with locks_lost %v, want 2: %v", r["locks_lost"], r)
		}
		sessionLost = sessionLost || r["msg"] == "session lost"
		kaFailed = kaFailed || r["msg"] == "session keepalive failed"
	}
	if !sessionLost {
		t.Errorf("no session lost record: %v", recs)
	}
	if kaFailed != (kaErrs > 0) {
		t.Errorf("keepalive failures: %d observed, logged %v", kaErrs, kaFailed)
	}
	if started, lost := rec.sessionCounts(); started != 1 || !slices.Equal(lost, []int{2}) {
		t.Errorf("sessions started %d, lost %v; want 1 and [2] (the set counts once)", started, lost)
	}

	// The same Client goes on under a new session once etcd is back.
	cl.Restart(0)
	l2 := mustAcquire(t, c, "s")
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after the loss is not above %d", l2.Token(), l.Token())
	}
	if started, _ := rec.sessionCounts(); started != 2 {
		t.Errorf("sessions started %d, want 2", started)
	}
}

func TestClient_WithLogger_nilIsSilent(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t), lockclient.WithLogger(nil), lockclient.WithObserver(nil))
	l := mustAcquire(t, c, "quiet")
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestClient_permitNamed: a permit's grant is logged and reported under its
// slot's name, as its release and end are: one name in both.
func TestClient_permitNamed(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	rec := &recorder{}
	var logs logBuffer
	c := newClient(t, srv.Client(t), lockclient.WithObserver(rec), lockclient.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	first, err := c.AcquirePermit(t.Context(), "settle", 3)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.TryAcquirePermit(t.Context(), "settle", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*lockclient.Lock{first, second} {
		if err := p.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	recs := logs.records(t)
	for _, p := range []*lockclient.Lock{first, second} {
		slot := p.Resource() // "settle/0000", "settle/0001"
		granted, released := find(recs, "lock granted", slot), find(recs, "lock released", slot)
		if granted == nil || released == nil {
			t.Fatalf("slot %q: grant logged %v, release logged %v; want both under lock=%q; log:\n%s", slot, granted, released, slot, logs.buf.String())
		}
	}
	acq, ended, _ := rec.snapshot()
	want := []string{first.Resource() + " granted", second.Resource() + " granted"}
	if !slices.Equal(acq, want) {
		t.Fatalf("Observer told Acquired %q, want %q", acq, want)
	}
	if want := []string{first.Resource() + " released", second.Resource() + " released"}; !slices.Equal(ended, want) {
		t.Fatalf("Observer told Ended %q, want %q", ended, want)
	}
}
