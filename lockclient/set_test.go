package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// Compile-time: a *Lock (a set's too) is a grant covering its resources.
var (
	_ fence.Set     = (*lockclient.Lock)(nil)
	_ fence.Watched = (*lockclient.Lock)(nil)
)

func mustAcquireSet(t testing.TB, c *lockclient.Client, names []string, opts ...lockclient.LockOption) *lockclient.Lock {
	t.Helper()
	s, err := c.AcquireSet(t.Context(), names, opts...)
	if err != nil {
		t.Fatalf("AcquireSet(%q): %v", names, err)
	}
	return s
}

// setExclusion checks that no name is held by two grants at once, that each
// name's successive grants have strictly increasing tokens, and that no token is
// granted twice (a set's names share one grant).
type setExclusion struct {
	t      testing.TB
	mu     sync.Mutex
	holder map[string]fence.Token
	last   map[string]fence.Token
	seen   map[fence.Token]bool
	grants int
}

func (e *setExclusion) enter(names []string, tok fence.Token) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen[tok] {
		e.t.Errorf("token %d granted twice", tok)
	}
	e.seen[tok] = true
	for _, n := range names {
		if h, ok := e.holder[n]; ok {
			e.t.Errorf("%q granted with token %d while token %d holds it", n, tok, h)
		}
		if tok <= e.last[n] {
			e.t.Errorf("%q granted with token %d after token %d", n, tok, e.last[n])
		}
		e.holder[n], e.last[n] = tok, tok
	}
	e.grants++
}

func (e *setExclusion) leave(names []string, tok fence.Token) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range names {
		if e.holder[n] != tok {
			e.t.Errorf("%q left by token %d but held by %d", n, tok, e.holder[n])
		}
		delete(e.holder, n)
	}
}

// TestClient_AcquireSet_mutualExclusion runs goroutines over several Clients
// that take overlapping sets, listing their names in opposite orders, and single
// locks on the same names. No name is ever held twice at once, tokens rise per
// name, and every goroutine finishes its rounds: nobody deadlocks.
func TestClient_AcquireSet_mutualExclusion(t *testing.T) {
	srv := shared.Cluster(t)
	clients := make([]*lockclient.Client, 3)
	for i := range clients {
		clients[i] = newClient(t, srv.Client(t))
	}
	shapes := [][]string{{"a", "b"}, {"c", "b"}, {"b", "a"}, {"b", "c"}, {"c", "a", "b"}, {"b"}, {"a"}}
	ex := &setExclusion{t: t, holder: map[string]fence.Token{}, last: map[string]fence.Token{}, seen: map[fence.Token]bool{}}
	const goroutines, rounds = 16, 12
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			c := clients[i%len(clients)]
			for k := range rounds {
				names := shapes[(i+k)%len(shapes)]
				var g interface {
					fence.Grant
					Release(context.Context) error
				}
				var err error
				if len(names) == 1 && k%2 == 0 {
					g, err = c.Acquire(t.Context(), names[0])
				} else {
					g, err = c.AcquireSet(t.Context(), names)
				}
				if err != nil {
					t.Errorf("goroutine %d: acquire %q: %v", i, names, err)
					return
				}
				ex.enter(names, g.Token())
				time.Sleep(time.Duration(k%3) * time.Millisecond)
				ex.leave(names, g.Token())
				if err := g.Release(t.Context()); err != nil {
					t.Errorf("goroutine %d: release %q: %v", i, names, err)
				}
			}
		})
	}
	wg.Wait()
	if ex.grants != goroutines*rounds {
		t.Fatalf("%d grants, want %d", ex.grants, goroutines*rounds)
	}
}

// TestClient_AcquireSet_oneToken: every key of a set carries one create
// revision, the set's token; Resources and Resource are as documented; Holder
// and List show the set's names.
func TestClient_AcquireSet_oneToken(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	c := newClient(t, cli, lockclient.WithIdentity("transfer-1"))
	before := mustAcquire(t, c, "solo")
	s := mustAcquireSet(t, c, []string{"account-7", "account-42", "ledger"})
	if s.Token() <= before.Token() {
		t.Fatalf("set token %d after %d", s.Token(), before.Token())
	}
	want := []string{"account-42", "account-7", "ledger"}
	if got := s.Resources(); !slices.Equal(got, want) {
		t.Fatalf("Resources = %q, want %q", got, want)
	}
	s.Resources()[0] = "changed" // a copy: the set is unchanged
	if s.Resource() != "account-42" || s.Resources()[0] != "account-42" {
		t.Fatalf("Resource = %q, Resources = %q; want account-42 first", s.Resource(), s.Resources())
	}
	if err := fence.CheckGrant(s); err != nil {
		t.Fatalf("CheckGrant(held set) = %v", err)
	}
	if err := grant.CheckSingle(s); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("CheckSingle(held set) = %v, want fence.ErrInvalidArgument", err)
	}
	// A lock on one name is a set of one: a single-row write takes it.
	if got := before.Resources(); !slices.Equal(got, []string{"solo"}) || before.Resource() != "solo" {
		t.Fatalf("single lock: Resources = %q, Resource = %q; want [solo]", got, before.Resource())
	}
	if err := grant.CheckSingle(before); err != nil {
		t.Fatalf("CheckSingle(held lock) = %v", err)
	}
	for _, n := range want {
		resp, err := cli.Get(t.Context(), defaultPrefix+n)
		if err != nil || len(resp.Kvs) != 1 || fence.Token(resp.Kvs[0].CreateRevision) != s.Token() {
			t.Fatalf("key %q: %v, %v; want create revision %d", n, resp, err, s.Token())
		}
		info, err := c.Holder(t.Context(), n)
		if err != nil || info.Token != s.Token() || !slices.Equal(info.Set, want) || info.ClientID != "transfer-1" {
			t.Fatalf("Holder(%q) = %+v, %v; want token %d, set %q", n, info, err, s.Token(), want)
		}
	}
	infos, err := c.List(t.Context())
	if err != nil || len(infos) != 4 {
		t.Fatalf("List = %+v, %v", infos, err)
	}
	for _, in := range infos {
		wantSet := want
		if in.Name == "solo" {
			wantSet = nil
		}
		if !slices.Equal(in.Set, wantSet) {
			t.Errorf("List: %q has set %q, want %q", in.Name, in.Set, wantSet)
		}
	}
	if info, err := c.Holder(t.Context(), "solo"); err != nil || info.Set != nil {
		t.Fatalf("Holder(solo) = %+v, %v; want no set", info, err)
	}
}

// TestClient_AcquireSet_successorWaits: a single lock on one name of a held set
// waits for the set's release, then gets a higher token; Release deletes every key.
func TestClient_AcquireSet_successorWaits(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	a := newClient(t, cli)
	b := newClient(t, srv.Client(t))
	s := mustAcquireSet(t, a, []string{"a", "b"})
	got := make(chan *lockclient.Lock, 1)
	go func() {
		l, err := b.Acquire(t.Context(), "b")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // time for a wrong grant to show; not a timing assertion
	select {
	case l := <-got:
		t.Fatalf("single lock granted with token %v while the set holds it", l)
	default:
	}
	if err := s.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !isClosed(s.Done()) || !errors.Is(context.Cause(s.Context()), lockclient.ErrReleased) {
		t.Fatalf("released set: cause %v", context.Cause(s.Context()))
	}
	l := <-got
	if l == nil || l.Token() <= s.Token() {
		t.Fatalf("successor %v after set token %d", l, s.Token())
	}
	if resp, err := cli.Get(t.Context(), defaultPrefix+"a"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("key a after release: %v, %v", resp, err)
	}
	if err := s.Release(t.Context()); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
	if err := fence.CheckGrant(s); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("CheckGrant(released set) = %v, want ErrLost", err)
	}
}

// TestClient_TryAcquireSet_held: a contended try names the first held name and
// writes nothing; it takes none of the free names.
func TestClient_TryAcquireSet_held(t *testing.T) {
	srv := locktest.Start(t)
	cli := srv.Client(t)
	a := newClient(t, cli, lockclient.WithIdentity("worker-a"))
	b := newClient(t, srv.Client(t))
	la := mustAcquire(t, a, "m")
	mustAcquire(t, b, "warm-up") // grants b's session
	before := revision(t, cli)
	_, err := b.TryAcquireSet(t.Context(), []string{"z", "m", "n"})
	var he *lockclient.HeldError
	if !errors.As(err, &he) || he.Name != "m" || he.Token != la.Token() || he.Holder.ClientID != "worker-a" {
		t.Fatalf("TryAcquireSet = %v, want *HeldError for m held by worker-a", err)
	}
	if after := revision(t, cli); after != before {
		t.Fatalf("a contended TryAcquireSet wrote: revision %d -> %d", before, after)
	}
	if _, err := b.TryAcquire(t.Context(), "z"); err != nil {
		t.Fatalf("z after the refused set: %v", err)
	}
	s, err := a.TryAcquireSet(t.Context(), []string{"n", "o"})
	if err != nil || !slices.Equal(s.Resources(), []string{"n", "o"}) {
		t.Fatalf("TryAcquireSet of free names = %v, %v", s, err)
	}
}

// TestClient_AcquireSet_badInput: every bad set is refused before any I/O: the
// Client's etcd cannot be reached, so any request would hang until ctx ends.
func TestClient_AcquireSet_badInput(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c := newClient(t, cli)
	many := make([]string, maxSetSize+1)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	tests := []struct {
		name  string
		names []string
		opts  []lockclient.LockOption
		is    error
		msg   string
	}{
		{"nil", nil, nil, fence.ErrInvalidArgument, "no names"},
		{"empty", []string{}, nil, fence.ErrInvalidArgument, "no names"},
		{"duplicate", []string{"a", "b", "a"}, nil, fence.ErrInvalidArgument, `"a" listed more than once`},
		{"too many", many, nil, fence.ErrInvalidArgument, "129 names, the limit is 128"},
		{"empty name", []string{"a", ""}, nil, fence.ErrInvalidArgument, "invalid resource: empty resource name"},
		{"slash", []string{"a", "b/c"}, nil, fence.ErrInvalidArgument, `lock name "b/c" contains a slash`},
		{"long name", []string{strings.Repeat("x", 200+1)}, nil, fence.ErrInvalidArgument, "the limit is 200"},
		{"nil option", []string{"a"}, []lockclient.LockOption{nil}, fence.ErrInvalidArgument, "nil"},
		{"lease under minimum", []string{"a"}, []lockclient.LockOption{lockclient.WithManualRenewal(500 * time.Millisecond)}, fence.ErrInvalidArgument, "minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			for _, try := range []bool{false, true} {
				var s *lockclient.Lock
				var err error
				if try {
					s, err = c.TryAcquireSet(ctx, tt.names, tt.opts...)
				} else {
					s, err = c.AcquireSet(ctx, tt.names, tt.opts...)
				}
				if s != nil || !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("try=%v: %v, %v; want %v mentioning %q", try, s, err, tt.is, tt.msg)
				}
			}
		})
	}
	var nilSet *lockclient.Lock
	if err := fence.CheckGrant(nilSet); err == nil {
		t.Fatal("CheckGrant(nil *Lock) = nil")
	}
	if err := nilSet.Release(t.Context()); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("nil set Release = %v", err)
	}
	if err := nilSet.Renew(t.Context()); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("nil set Renew = %v", err)
	}
	if !isClosed(nilSet.Done()) || nilSet.Context().Err() == nil || nilSet.Resources() != nil || nilSet.Token() != 0 {
		t.Fatal("nil set is not an ended, empty grant")
	}
}

// TestClient_AcquireSet_maxSize: a set of MaxSetSize names fits etcd's default
// limit on Txn operations, and one name more is refused before any I/O.
func TestClient_AcquireSet_maxSize(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	names := make([]string, maxSetSize)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", strings.Repeat("r", 190), i)
	}
	s := mustAcquireSet(t, c, names)
	if err := s.Renew(t.Context()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	infos, err := c.List(t.Context())
	if err != nil || len(infos) != len(names) || len(infos[0].Set) != len(names) {
		t.Fatalf("List: %d infos, %v", len(infos), err)
	}
	if err := s.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if infos, err := c.List(t.Context()); err != nil || len(infos) != 0 {
		t.Fatalf("List after release: %d infos, %v", len(infos), err)
	}
}
