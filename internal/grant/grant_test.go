package grant_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

type set struct {
	fence.Grant
	res []string
}

func (s set) Resources() []string { return s.res }

type watched struct {
	fence.Grant
	done chan struct{}
}

func (w watched) Done() <-chan struct{} { return w.done }

type leased struct {
	fence.Grant
	d time.Duration
}

func (l leased) Lease() time.Duration { return l.d }

func TestCheckSingle(t *testing.T) {
	g := fence.NewGrant("a", 3)
	tests := []struct {
		name string
		g    fence.Grant
		want error
		msg  string // what the error must say
	}{
		{"grant", g, nil, ""},
		{"set of one", set{g, []string{"a"}}, nil, ""},
		{"set of one named twice", set{g, []string{"a", "a"}}, nil, ""},
		{"set of two", set{g, []string{"a", "b"}}, fence.ErrInvalidArgument, "covers 2 resources"},
		{"empty set", set{g, nil}, fence.ErrInvalidArgument, "no resources"},
		{"nil", nil, fence.ErrInvalidArgument, "nil grant"},
		{"zero token", fence.NewGrant("a", 0), fence.ErrInvalidArgument, `invalid token 0 for "a"`},
	}
	for _, tt := range tests {
		err := grant.CheckSingle(tt.g)
		if (tt.want == nil) != (err == nil) || (tt.want != nil && (!errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg))) {
			t.Errorf("%s: CheckSingle = %v, want %v saying %q", tt.name, err, tt.want, tt.msg)
		}
	}
}

func TestResources(t *testing.T) {
	g := fence.NewGrant("b", 3)
	if got := mustCheck(t, g).Resources(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("Resources(grant) = %q", got)
	}
	res := []string{"c", "a", "c", "b"}
	if got := mustCheck(t, set{g, res}).Resources(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Resources(set) = %q", got)
	}
	if !slices.Equal(res, []string{"c", "a", "c", "b"}) {
		t.Fatal("Resources changed the set's slice")
	}
}

func TestCheckLost(t *testing.T) {
	g := fence.NewGrant("a", 3)
	done := make(chan struct{})
	w := watched{g, done}
	var nilWatched *watched
	if fence.CheckLost(g) != nil || fence.CheckLost(w) != nil || fence.CheckLost(nilWatched) != nil || fence.CheckLost(watched{g, nil}) != nil {
		t.Fatal("CheckLost refused a live grant")
	}
	close(done)
	if err := fence.CheckLost(w); !errors.Is(err, fence.ErrLost) || err.Error() != `fence: lock lost: "a" at token 3` {
		t.Fatalf("CheckLost(lost) = %v", err)
	}
}

func TestCommitUnknown(t *testing.T) {
	cause := errors.New("driver: connection reset")
	g := fence.NewGrant("account-42", 7)
	tests := []struct {
		err  error
		msg  string
		also error
	}{
		{grant.CommitUnknown(g, "commit", cause), `fence: commit outcome unknown: commit for "account-42" at token 7: driver: connection reset`, cause},
		{grant.CommitUnknown(g, "update", nil), `fence: commit outcome unknown: update for "account-42" at token 7`, fence.ErrCommitUnknown},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, fence.ErrCommitUnknown) || !errors.Is(tt.err, tt.also) || tt.err.Error() != tt.msg {
			t.Errorf("CommitUnknown = %v, want %q matching ErrCommitUnknown and %v", tt.err, tt.msg, tt.also)
		}
		if errors.Is(tt.err, fence.ErrLost) || errors.Is(tt.err, fence.ErrStale) {
			t.Errorf("CommitUnknown = %v matches another sentinel", tt.err)
		}
	}
}

func mustCheck(t *testing.T, g fence.Grant) *grant.Checked {
	t.Helper()
	c, err := grant.Check(g)
	if err != nil {
		t.Fatalf("Check(%v) = %v", g, err)
	}
	return c
}

func TestChecked_IdleTimeout(t *testing.T) {
	g := fence.NewGrant("a", 3)
	tests := []struct {
		g        fence.Grant
		override time.Duration
		want     time.Duration
	}{
		{g, 0, grant.DefaultIdleTimeout},
		{g, 2 * time.Second, 2 * time.Second},
		{leased{g, 4 * time.Second}, 0, 4 * time.Second},
		{leased{g, 4 * time.Second}, time.Second, time.Second},
		{leased{g, 0}, 0, grant.DefaultIdleTimeout},
		{g, time.Microsecond, time.Millisecond},
	}
	for _, tt := range tests {
		if got := mustCheck(t, tt.g).IdleTimeout(tt.override); got != tt.want {
			t.Errorf("IdleTimeout(%T, %v) = %v, want %v", tt.g, tt.override, got, tt.want)
		}
	}
}

// watchedSet is a fence.Set that is also fence.Watched.
type watchedSet struct {
	set
	done chan struct{}
}

func (w watchedSet) Done() <-chan struct{} { return w.done }

// TestCheck: the grant is checked once and normalized (resources sorted and each
// once, lease and Done read once); a *Checked passes through untouched, and the
// helpers read it without asking again.
func TestCheck(t *testing.T) {
	done := make(chan struct{})
	g := watchedSet{set{fence.NewGrant("b", 4), []string{"c", "a", "c"}}, done}
	c, err := grant.Check(g)
	if err != nil {
		t.Fatal(err)
	}
	if c.Resource() != "b" || c.Token() != 4 || !slices.Equal(c.Resources(), []string{"a", "c"}) || c.Lease() != 0 {
		t.Fatalf("Check() = %q %d %q %v", c.Resource(), c.Token(), c.Resources(), c.Lease())
	}
	if again, err := grant.Check(c); err != nil || again != c {
		t.Fatalf("Check(*Checked) = %p, %v; want the same value", again, err)
	}
	if !c.Multi() || fence.CheckLost(c) != nil || c.IdleTimeout(0) != grant.DefaultIdleTimeout {
		t.Fatal("helpers misread a live *Checked")
	}
	close(done)
	if err := fence.CheckLost(c); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("CheckLost(lost *Checked) = %v", err)
	}
	if _, err := grant.Check(nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("Check(nil) = %v", err)
	}
	l, err := grant.Check(leased{fence.NewGrant("a", 1), 2 * time.Second})
	if err != nil || l.Lease() != 2*time.Second || l.IdleTimeout(0) != 2*time.Second || l.Multi() {
		t.Fatalf("Check(leased) = %v, %v", l, err)
	}
	if _, err := grant.CheckOne(c); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("CheckOne(set of two) = %v", err)
	}
}
