package lockclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// termRecorder is an Observer and LeaderObserver that keeps the terms it was told.
type termRecorder struct {
	recorder
	tmu   sync.Mutex
	terms []string // "begun N", "ended N cause"
}

var _ lockclient.LeaderObserver = (*termRecorder)(nil)

func (r *termRecorder) TermBegun(name string, token fence.Token) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	r.terms = append(r.terms, fmt.Sprintf("begun %d", token))
}

func (r *termRecorder) TermEnded(name string, token fence.Token, held time.Duration, cause string) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	r.terms = append(r.terms, fmt.Sprintf("ended %d %s", token, cause))
}

func (r *termRecorder) events() []string {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	return slices.Clone(r.terms)
}

// leadAsync runs c.Lead in a goroutine; each term is sent on terms, and fn
// returns when the term ends (or with what stop sends). The result of Lead
// arrives on the returned channel.
func leadAsync(ctx context.Context, c *lockclient.Client, name string, terms chan<- *lockclient.Lock, opts ...lockclient.LockOption) <-chan error {
	res := make(chan error, 1)
	go func() {
		res <- c.Lead(ctx, name, func(term *lockclient.Lock) error {
			terms <- term
			<-term.Done()
			return context.Cause(term.Context())
		}, opts...)
	}()
	return res
}

func nextTerm(t *testing.T, terms <-chan *lockclient.Lock, what string) *lockclient.Lock {
	t.Helper()
	select {
	case l := <-terms:
		return l
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: no term began", what)
		return nil
	}
}

func leadResult(t *testing.T, res <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: Lead did not return", what)
		return nil
	}
}

func TestClient_Lead_badInput(t *testing.T) {
	srv := locktest.Start(t)
	c := newClient(t, srv.Client(t))
	fn := func(*lockclient.Lock) error { return nil }
	tests := []struct {
		name, lock string
		fn         func(*lockclient.Lock) error
		opts       []lockclient.LockOption
		msg        string
	}{
		{"empty name", "", fn, nil, "empty resource name"},
		{"slash", "a/b", fn, nil, "slash"},
		{"control character", "a\nb", fn, nil, "control"},
		{"nil function", "scheduler", nil, nil, "nil function"},
		{"nil option", "scheduler", fn, []lockclient.LockOption{nil}, "option 0 is nil"},
		{"value over the limit", "scheduler", fn, []lockclient.LockOption{lockclient.WithValue(make([]byte, lockclient.MaxValueSize+1))}, "limit"},
		{"value over etcd's request size", "scheduler", fn, []lockclient.LockOption{lockclient.WithValue(make([]byte, 2<<20))}, "limit"},
	}
	// A cancelled context: any I/O before the check would return its error instead.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Lead(ctx, tt.lock, tt.fn, tt.opts...)
			if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Lead = %v; want fence.ErrInvalidArgument mentioning %q", err, tt.msg)
			}
		})
	}
	// The largest value allowed is stored and read back.
	big := bytes.Repeat([]byte{0xfe}, lockclient.MaxValueSize)
	err := c.Lead(t.Context(), "big-value", func(term *lockclient.Lock) error {
		info, err := c.Holder(t.Context(), "big-value")
		if err != nil {
			return err
		}
		if !bytes.Equal(info.Value, big) {
			return fmt.Errorf("value read back is %d bytes, want %d", len(info.Value), len(big))
		}
		return nil
	}, lockclient.WithValue(big))
	if err != nil {
		t.Fatalf("Lead with a MaxValueSize value: %v", err)
	}
}

// TestClient_Lead_resign: when the leader's ctx ends, its term ends and the
// lock is released at once: the waiting candidate leads next, with a higher token.
func TestClient_Lead_resign(t *testing.T) {
	srv := locktest.Start(t)
	obsA, obsB := &termRecorder{}, &termRecorder{}
	a := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL), lockclient.WithObserver(obsA))
	b := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL), lockclient.WithObserver(obsB))
	termsA, termsB := make(chan *lockclient.Lock, 4), make(chan *lockclient.Lock, 4)
	ctxA, cancelA := context.WithCancel(t.Context())
	resA := leadAsync(ctxA, a, "scheduler", termsA, lockclient.WithValue([]byte("10.0.0.1:8080")))
	ta := nextTerm(t, termsA, "a")
	resB := leadAsync(t.Context(), b, "scheduler", termsB, lockclient.WithValue([]byte("10.0.0.2:8080")))

	info, err := b.Holder(t.Context(), "scheduler")
	if err != nil || info.Token != ta.Token() || string(info.Value) != "10.0.0.1:8080" {
		t.Fatalf("Holder = %+v, %v; want a's term %d with its address", info, err, ta.Token())
	}
	start := time.Now()
	cancelA()
	tb := nextTerm(t, termsB, "b after a resigned")
	t.Logf("handover on ctx end: %v", time.Since(start))
	if tb.Token() <= ta.Token() {
		t.Fatalf("b's token %d not above a's %d", tb.Token(), ta.Token())
	}
	if err := leadResult(t, resA, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a's Lead = %v, want context.Canceled", err)
	}
	if cause := context.Cause(ta.Context()); !errors.Is(cause, lockclient.ErrReleased) {
		t.Fatalf("a's term ended with %v, want ErrReleased", cause)
	}
	if got, want := obsA.events(), []string{fmt.Sprintf("begun %d", ta.Token()), fmt.Sprintf("ended %d resigned", ta.Token())}; !slices.Equal(got, want) {
		t.Fatalf("a's terms %q, want %q", got, want)
	}
	if got, want := obsB.events(), []string{fmt.Sprintf("begun %d", tb.Token())}; !slices.Equal(got, want) {
		t.Fatalf("b's terms %q, want %q (never told of a term it did not have)", got, want)
	}
	select {
	case err := <-resB:
		t.Fatalf("b's Lead returned %v while leading", err)
	default:
	}
}

// TestClient_Lead_neverLed: a candidate that never led and gives up is told
// of no term, and its Lead returns ctx's error.
func TestClient_Lead_neverLed(t *testing.T) {
	srv := locktest.Start(t)
	a := newClient(t, srv.Client(t))
	obs := &termRecorder{}
	logs := &logBuffer{}
	b := newClient(t, srv.Client(t), lockclient.WithObserver(obs), lockclient.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	termsA := make(chan *lockclient.Lock, 1)
	leadAsync(t.Context(), a, "singleton", termsA)
	nextTerm(t, termsA, "a")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	called := false
	err := b.Lead(ctx, "singleton", func(*lockclient.Lock) error { called = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || called {
		t.Fatalf("Lead = %v (fn called: %v), want DeadlineExceeded without a term", err, called)
	}
	if ev := obs.events(); len(ev) != 0 {
		t.Fatalf("never-leader told %q", ev)
	}
	if logs.contains("leader term") {
		t.Fatal("never-leader logged a term")
	}
}

// TestClient_Lead_fnEnds: fn's own return ends Lead (nil, or a *TermError
// matching fn's error), releasing the lock; a panic releases it and passes on.
func TestClient_Lead_fnEnds(t *testing.T) {
	srv := locktest.Start(t)
	errJob := errors.New("job failed")
	tests := []struct {
		name  string
		fn    func(*lockclient.Lock) error
		want  error // nil: Lead returns nil
		cause string
	}{
		{"returns nil", func(*lockclient.Lock) error { return nil }, nil, "returned"},
		{"returns an error", func(*lockclient.Lock) error { return fmt.Errorf("run: %w", errJob) }, errJob, "failed"},
		{"panics", func(*lockclient.Lock) error { panic("boom") }, nil, "panicked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := &termRecorder{}
			c := newClient(t, srv.Client(t), lockclient.WithObserver(obs))
			var term *lockclient.Lock
			var err error
			var panicked any
			func() {
				defer func() { panicked = recover() }()
				err = c.Lead(t.Context(), "job", func(l *lockclient.Lock) error { term = l; return tt.fn(l) })
			}()
			if tt.cause == "panicked" {
				if panicked != "boom" {
					t.Fatalf("recovered %v, want the panic re-raised", panicked)
				}
			} else if panicked != nil {
				t.Fatalf("panic %v", panicked)
			}
			var te *lockclient.TermError
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("Lead = %v, want nil", err)
			case tt.want != nil && (!errors.Is(err, tt.want) || !errors.As(err, &te) || te.Token != term.Token() || errors.Is(err, fence.ErrLost)):
				t.Fatalf("Lead = %v, want a *TermError of term %d matching %v and not fence.ErrLost", err, term.Token(), tt.want)
			}
			if !isClosed(term.Done()) {
				t.Fatal("term still open after Lead returned")
			}
			if _, err := c.Holder(t.Context(), "job"); !errors.Is(err, lockclient.ErrNotHeld) {
				t.Fatalf("Holder after Lead = %v, want the lock released", err)
			}
			if got, want := obs.events(), []string{fmt.Sprintf("begun %d", term.Token()), fmt.Sprintf("ended %d %s", term.Token(), tt.cause)}; !slices.Equal(got, want) {
				t.Fatalf("terms %q, want %q", got, want)
			}
		})
	}
}

// TestClient_Lead_keyDeleted: an operator's release of the leader's key ends
// its term as lost within moments (the term watches its key), and Lead
// campaigns again, winning a new term with a higher token.
func TestClient_Lead_keyDeleted(t *testing.T) {
	srv := locktest.Start(t)
	obs := &termRecorder{}
	logs := &logBuffer{}
	c := newClient(t, srv.Client(t), lockclient.WithObserver(obs), lockclient.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	op := newClient(t, srv.Client(t))
	terms := make(chan *lockclient.Lock, 4)
	res := leadAsync(t.Context(), c, "scheduler", terms)
	first := nextTerm(t, terms, "first")
	start := time.Now()
	if err := op.Release(t.Context(), "scheduler", first.Token()); err != nil {
		t.Fatalf("operator release: %v", err)
	}
	waitClosed(t, first.Done(), "term after its key was deleted")
	t.Logf("term ended %v after its key was deleted", time.Since(start))
	if cause := context.Cause(first.Context()); !lostAt(cause, first) || errors.Is(cause, lockclient.ErrSessionLost) {
		t.Fatalf("term ended with %v, want fence.ErrLost (key deleted)", cause)
	}
	second := nextTerm(t, terms, "after the loss")
	if second.Token() <= first.Token() {
		t.Fatalf("second term's token %d not above %d", second.Token(), first.Token())
	}
	select {
	case err := <-res:
		t.Fatalf("Lead returned %v after a lost term, want it to campaign again", err)
	default:
	}
	want := []string{fmt.Sprintf("begun %d", first.Token()), fmt.Sprintf("ended %d key_deleted", first.Token()), fmt.Sprintf("begun %d", second.Token())}
	if got := obs.events(); !slices.Equal(got, want) {
		t.Fatalf("terms %q, want %q", got, want)
	}
	// The log tells the same: each term begun, the first ended with its cause.
	var logged []string
	for _, r := range logs.records(t) {
		switch r["msg"] {
		case "leader term begun":
			logged = append(logged, fmt.Sprintf("begun %v", r["token"]))
		case "leader term ended":
			logged = append(logged, fmt.Sprintf("ended %v %v", r["token"], r["cause"]))
			if r["level"] != "WARN" {
				t.Errorf("a lost term logged at %v, want WARN", r["level"])
			}
		}
	}
	if !slices.Equal(logged, want) {
		t.Fatalf("logged terms %q, want %q", logged, want)
	}
}

// TestClient_Lead_closed: closing the Client ends the term and Lead with ErrClosed.
func TestClient_Lead_closed(t *testing.T) {
	srv := locktest.Start(t)
	c := newClient(t, srv.Client(t))
	terms := make(chan *lockclient.Lock, 1)
	res := leadAsync(t.Context(), c, "scheduler", terms)
	term := nextTerm(t, terms, "term")
	c.Close()
	if err := leadResult(t, res, "after Close"); !errors.Is(err, lockclient.ErrClosed) {
		t.Fatalf("Lead = %v, want ErrClosed", err)
	}
	if cause := context.Cause(term.Context()); !errors.Is(cause, lockclient.ErrClosed) {
		t.Fatalf("term cause %v, want ErrClosed", cause)
	}
	noClientGoroutines(t)
}
