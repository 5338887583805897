package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

func mustPermit(t testing.TB, c *lockclient.Client, name string, n int) *lockclient.Lock {
	t.Helper()
	l, err := c.AcquirePermit(t.Context(), name, n)
	if err != nil {
		t.Fatalf("AcquirePermit(%q, %d): %v", name, n, err)
	}
	return l
}

// slotsOf returns the slot names of the permits held of name.
func slotsOf(t testing.TB, c *lockclient.Client, name string) []string {
	t.Helper()
	infos, err := c.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var slots []string
	for _, in := range infos {
		if strings.HasPrefix(in.Name, name+"/") != (in.Semaphore == name) {
			t.Errorf("permit %q: Semaphore %q, want %q", in.Name, in.Semaphore, name)
		}
		if in.Semaphore == name {
			slots = append(slots, in.Name)
		}
	}
	return slots
}

func TestClient_AcquirePermit_basics(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cs := []*lockclient.Client{
		newClient(t, srv.Client(t), lockclient.WithIdentity("w0")),
		newClient(t, srv.Client(t), lockclient.WithIdentity("w1")),
		newClient(t, srv.Client(t), lockclient.WithIdentity("w2")),
	}
	var ps []*lockclient.Lock
	for i, c := range cs {
		p := mustPermit(t, c, "exports", 3)
		if want := "exports/000" + string(rune('0'+i)); p.Resource() != want {
			t.Fatalf("permit %d: Resource %q, want %q", i, p.Resource(), want)
		}
		if i > 0 && p.Token() <= ps[i-1].Token() {
			t.Fatalf("permit %d: token %d not above %d", i, p.Token(), ps[i-1].Token())
		}
		ps = append(ps, p)
	}
	if got := slotsOf(t, cs[0], "exports"); !slices.Equal(got, []string{"exports/0000", "exports/0001", "exports/0002"}) {
		t.Fatalf("Permits = %q", got)
	}
	all, err := cs[0].List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[1].Name != "exports/0001" || all[1].ClientID != "w1" || all[1].Token != ps[1].Token() || all[1].Semaphore != "exports" {
		t.Fatalf("List = %+v, want the three permits and no mark", all)
	}
	h, err := cs[0].Holder(t.Context(), "exports/0002")
	if err != nil || h.ClientID != "w2" || h.Token != ps[2].Token() || h.LeaseLeft <= 0 {
		t.Fatalf("Holder(slot 2) = %+v, %v", h, err)
	}
	if _, err := cs[0].Holder(t.Context(), "exports"); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("Holder(semaphore) = %v, want fence.ErrInvalidArgument", err)
	}
	// A freed slot is taken again, with a higher token.
	if err := ps[1].Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !isClosed(ps[1].Done()) || !errors.Is(context.Cause(ps[1].Context()), lockclient.ErrReleased) {
		t.Fatal("released permit not ended with ErrReleased")
	}
	again := mustPermit(t, cs[1], "exports", 3)
	if again.Resource() != "exports/0001" || again.Token() <= ps[2].Token() {
		t.Fatalf("permit after release: %q token %d", again.Resource(), again.Token())
	}
	// Client.Release takes a slot name and a token.
	if err := cs[0].Release(t.Context(), again.Resource(), again.Token()); err != nil {
		t.Fatalf("Client.Release(slot): %v", err)
	}
	if got := slotsOf(t, cs[0], "exports"); len(got) != 2 {
		t.Fatalf("Permits after releases = %q", got)
	}
}

func TestClient_AcquirePermit_waits(t *testing.T) {
	srv := locktest.Start(t)
	a := newClient(t, srv.Client(t))
	b := newClient(t, srv.Client(t))
	held := mustPermit(t, a, "reports", 1)
	if _, err := b.TryAcquire(t.Context(), "other"); err != nil { // grant b's session first
		t.Fatal(err)
	}
	before := revision(t, srv.Client(t))
	got := make(chan *lockclient.Lock, 1)
	go func() {
		p, err := b.AcquirePermit(t.Context(), "reports", 1)
		if err != nil {
			t.Errorf("waiting AcquirePermit: %v", err)
		}
		got <- p
	}()
	// The waiter writes its place in line once, then nothing while it waits.
	cli := srv.Client(t)
	for revision(t, cli) == before {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // if it wrote more, it shows
	if after := revision(t, cli); after != before+1 {
		t.Fatalf("etcd revision moved from %d to %d while the waiter waited; want its place alone", before, after)
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p == nil || p.Resource() != "reports/0000" || p.Token() <= held.Token() {
		t.Fatalf("waiter got %v", p)
	}
}

func TestClient_TryAcquirePermit_busy(t *testing.T) {
	srv := locktest.Start(t)
	cli := srv.Client(t)
	a := newClient(t, cli, lockclient.WithIdentity("holder"))
	b := newClient(t, srv.Client(t))
	first := mustPermit(t, a, "uploads", 2)
	mustPermit(t, a, "uploads", 2)
	if _, err := b.TryAcquirePermit(t.Context(), "uploads", 2); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquirePermit of a full semaphore = %v, want ErrHeld", err)
	}
	before := revision(t, cli)
	_, err := b.TryAcquirePermit(t.Context(), "uploads", 2)
	var he *lockclient.HeldError
	if !errors.As(err, &he) || he.Name != "uploads/0000" || he.Token != first.Token() || he.Holder.ClientID != "holder" {
		t.Fatalf("TryAcquirePermit = %v, want *HeldError naming slot 0", err)
	}
	if after := revision(t, cli); after != before {
		t.Fatalf("a refused TryAcquirePermit wrote: revision %d -> %d", before, after)
	}
}

func TestClient_AcquirePermit_badInput(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	// A cancelled ctx: any I/O would fail with its error, so fence.ErrInvalidArgument
	// shows the input was refused first.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name, sem string
		n         int
		opts      []lockclient.LockOption
		msg       string
	}{
		{"no permits", "jobs", 0, nil, "want 1 to 1024"},
		{"negative", "jobs", -3, nil, "want 1 to 1024"},
		{"above MaxPermits", "jobs", maxPermits + 1, nil, "want 1 to 1024"},
		{"slash", "jobs/0001", 2, nil, "contains a slash"},
		{"empty", "", 2, nil, "empty resource name"},
		{"too long for slots", strings.Repeat("a", 196), 2, nil, "too long"},
		{"nil option", "jobs", 2, []lockclient.LockOption{nil}, "nil"},
		{"short manual lease", "jobs", 2, []lockclient.LockOption{lockclient.WithManualRenewal(500 * time.Millisecond)}, "minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, try := range []bool{false, true} {
				call := c.AcquirePermit
				if try {
					call = c.TryAcquirePermit
				}
				if _, err := call(ctx, tt.sem, tt.n, tt.opts...); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("try %v: %v; want fence.ErrInvalidArgument mentioning %q", try, err, tt.msg)
				}
			}
		})
	}
	if _, err := c.TryAcquirePermit(t.Context(), strings.Repeat("a", 195), maxPermits); err != nil {
		t.Fatalf("longest semaphore name, most permits: %v", err)
	}
}

// TestClient_AcquirePermit_lockClash: a name is a lock or a semaphore, decided
// in etcd, from whichever Client.
func TestClient_AcquirePermit_lockClash(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t))
	b := newClient(t, srv.Client(t))
	lock := mustAcquire(t, a, "ledger")
	for _, try := range []bool{false, true} {
		call := b.AcquirePermit
		if try {
			call = b.TryAcquirePermit
		}
		if _, err := call(t.Context(), "ledger", 2); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a semaphore") {
			t.Fatalf("permit of a held lock's name (try %v) = %v, want fence.ErrInvalidArgument", try, err)
		}
	}
	if err := lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := mustPermit(t, a, "batch", 2)
	if err := p.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Still a semaphore with no permit held.
	_, errAcquire := b.Acquire(t.Context(), "batch")
	_, errTry := b.TryAcquire(t.Context(), "batch")
	_, errSet := b.AcquireSet(t.Context(), []string{"other", "batch"})
	for call, err := range map[string]error{"Acquire": errAcquire, "TryAcquire": errTry, "AcquireSet": errSet} {
		if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "is a semaphore") {
			t.Errorf("%s of a semaphore's name = %v, want fence.ErrInvalidArgument", call, err)
		}
	}
	if _, err := b.Holder(t.Context(), "other"); !errors.As(err, new(*lockclient.NotHeldError)) {
		t.Errorf("AcquireSet refused but left %q held: %v", "other", err)
	}
}

// TestClient_AcquirePermit_changingN: n is per call. A call counts and takes
// only slots below its n; holders of higher slots keep them until they release.
func TestClient_AcquirePermit_changingN(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	d := newClient(t, srv.Client(t))
	var ps []*lockclient.Lock
	for range 3 {
		ps = append(ps, mustPermit(t, c, "pool", 3))
	}
	if _, err := d.TryAcquirePermit(t.Context(), "pool", 2); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("n=2 with slots 0-2 held = %v, want ErrHeld", err)
	}
	big, err := d.TryAcquirePermit(t.Context(), "pool", 5)
	if err != nil || big.Resource() != "pool/0003" {
		t.Fatalf("n=5 with slots 0-2 held = %v, %v; want slot 3", big, err)
	}
	// A smaller n after a larger one: slot 3 stays held, and the n=2 caller
	// takes a freed slot below 2.
	if err := ps[1].Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	small, err := d.TryAcquirePermit(t.Context(), "pool", 2)
	if err != nil || small.Resource() != "pool/0001" {
		t.Fatalf("n=2 after slot 1 freed = %v, %v; want slot 1", small, err)
	}
	if _, err := d.TryAcquirePermit(t.Context(), "pool", 2); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("n=2 with slots 0 and 1 held = %v, want ErrHeld", err)
	}
	if got := slotsOf(t, c, "pool"); !slices.Equal(got, []string{"pool/0000", "pool/0001", "pool/0002", "pool/0003"}) {
		t.Fatalf("Permits = %q: holders of higher slots keep them", got)
	}
	if isClosed(big.Done()) {
		t.Fatal("the holder of slot 3 lost it to a smaller n")
	}
}

// TestClient_AcquirePermit_markDeleted: with the semaphore's mark deleted (by
// hand) while a permit is held, the next call marks the name again and counts
// the held slots as before.
func TestClient_AcquirePermit_markDeleted(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	c := newClient(t, cli)
	held := mustPermit(t, c, "imports", 1)
	if _, err := cli.Delete(t.Context(), defaultPrefix+"imports"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquirePermit(t.Context(), "imports", 1); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquirePermit with the mark gone and slot 0 held = %v, want ErrHeld", err)
	}
	p, err := c.TryAcquirePermit(t.Context(), "imports", 2)
	if err != nil || p.Resource() != "imports/0001" || held.Resource() != "imports/0000" {
		t.Fatalf("TryAcquirePermit(n=2) = %v, %v; want slot 1", p, err)
	}
	if _, err := c.TryAcquire(t.Context(), "imports"); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("TryAcquire of the re-marked semaphore = %v, want fence.ErrInvalidArgument", err)
	}
}

// TestClient_AcquirePermit_manySlots: one attempt tries a run of slots; with
// every slot of the first run held, the next run is tried, up to n.
func TestClient_AcquirePermit_manySlots(t *testing.T) {
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	const n = 70
	for i := range n {
		p := mustPermit(t, c, "wide", n)
		if want := fmt.Sprintf("wide/%04d", i); p.Resource() != want {
			t.Fatalf("permit %d: %q, want %q", i, p.Resource(), want)
		}
	}
	if _, err := c.TryAcquirePermit(t.Context(), "wide", n); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquirePermit with all %d held = %v, want ErrHeld", n, err)
	}
	if got := slotsOf(t, c, "wide"); len(got) != n {
		t.Fatalf("Permits: %d, want %d", len(got), n)
	}
}

// TestClient_AcquirePermit_largeValue: a run of slots carries the value once
// per slot; with WithValue's largest value an attempt still fits etcd's
// request limit, one slot at a time.
func TestClient_AcquirePermit_largeValue(t *testing.T) {
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	big := lockclient.WithValue(make([]byte, maxValueSize))
	for i := range 3 {
		p, err := c.AcquirePermit(t.Context(), "blobs", 4, big)
		if err != nil || p.Resource() != fmt.Sprintf("blobs/%04d", i) {
			t.Fatalf("permit %d with a %d-byte value: %v, %v", i, maxValueSize, p, err)
		}
	}
}
