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
)

// termRecorder is an Observer that keeps the terms it was told.
type termRecorder struct {
	recorder
	tmu   sync.Mutex
	terms []string // "begun N", "ended N cause"
}

var _ lockclient.Observer = (*termRecorder)(nil)

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
	t.Parallel()
	srv := shared.Cluster(t)
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
		{"value over the limit", "scheduler", fn, []lockclient.LockOption{lockclient.WithValue(make([]byte, maxValueSize+1))}, "limit"},
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
	big := bytes.Repeat([]byte{0xfe}, maxValueSize)
	err := leadOnce(t.Context(), c, "big-value", func(term *lockclient.Lock) error {
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
	t.Parallel()
	srv := shared.Cluster(t)
	obsA, obsB := &termRecorder{}, &termRecorder{}
	a := newClient(t, srv.Client(t), lockclient.WithTTL(roomTTL), lockclient.WithObserver(obsA))
	b := newClient(t, srv.Client(t), lockclient.WithTTL(roomTTL), lockclient.WithObserver(obsB))
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
	t.Parallel()
	srv := shared.Cluster(t)
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

// leadOnce runs Lead for one term: fn's return resigns it (ctx ends), and
// leadOnce returns fn's error, or Lead's when it is not that resign's.
func leadOnce(ctx context.Context, c *lockclient.Client, name string, fn func(*lockclient.Lock) error, opts ...lockclient.LockOption) error {
	ctx, resign := context.WithCancel(ctx)
	defer resign()
	var fnErr error
	err := c.Lead(ctx, name, func(term *lockclient.Lock) error {
		fnErr = fn(term)
		resign()
		return fnErr
	}, opts...)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return fnErr
	}
	return err
}

// TestClient_Lead_fnReturnEndsTerm: fn's return (nil, an error, fence.ErrStale
// after an operator's fence) with its term still held ends the term, not
// Lead: the lock is released and Lead campaigns again, and a second term
// begins with a higher token. Only ctx's end makes Lead return, with ctx's error.
func TestClient_Lead_fnReturnEndsTerm(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	errJob := errors.New("job failed")
	tests := []struct {
		name  string
		ret   func(term *lockclient.Lock, resign context.CancelFunc) error // the first term's fn
		cause string                                                       // the first term's end
		terms int                                                          // terms begun
	}{
		{"returns nil", func(*lockclient.Lock, context.CancelFunc) error { return nil }, "returned", 2},
		{"returns an error", func(*lockclient.Lock, context.CancelFunc) error { return fmt.Errorf("run: %w", errJob) }, "failed", 2},
		{"returns fence.ErrStale", func(l *lockclient.Lock, _ context.CancelFunc) error {
			return fmt.Errorf("write: %w", &fence.StaleError{Resource: l.Resource(), Presented: l.Token(), Seen: l.Token() + 5})
		}, "failed", 2},
		{"ctx ends", func(_ *lockclient.Lock, resign context.CancelFunc) error { resign(); return nil }, "resigned", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := &termRecorder{}
			c := newClient(t, srv.Client(t), lockclient.WithObserver(obs))
			ctx, resign := context.WithCancel(t.Context())
			defer resign()
			var terms []*lockclient.Lock
			err := c.Lead(ctx, "job", func(term *lockclient.Lock) error {
				terms = append(terms, term)
				if len(terms) == 1 {
					if term.Context().Err() != nil {
						t.Errorf("first term ended before fn returned: %v", context.Cause(term.Context()))
					}
					return tt.ret(term, resign)
				}
				// The second term: the first ended released, and this one holds the lock.
				first := terms[0]
				if cause := context.Cause(first.Context()); !errors.Is(cause, lockclient.ErrReleased) {
					t.Errorf("first term ended with %v, want ErrReleased", cause)
				}
				if info, err := c.Holder(t.Context(), "job"); err != nil || info.Token != term.Token() {
					t.Errorf("Holder in the second term = %+v, %v; want token %d", info, err, term.Token())
				}
				resign()
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Lead = %v, want context.Canceled (only ctx's end makes it return)", err)
			}
			if len(terms) != tt.terms {
				t.Fatalf("%d terms begun, want %d", len(terms), tt.terms)
			}
			want := []string{fmt.Sprintf("begun %d", terms[0].Token()), fmt.Sprintf("ended %d %s", terms[0].Token(), tt.cause)}
			if tt.terms == 2 {
				if terms[1].Token() <= terms[0].Token() {
					t.Fatalf("second term's token %d not above the first's %d", terms[1].Token(), terms[0].Token())
				}
				want = append(want, fmt.Sprintf("begun %d", terms[1].Token()), fmt.Sprintf("ended %d resigned", terms[1].Token()))
			}
			if got := obs.events(); !slices.Equal(got, want) {
				t.Fatalf("terms %q, want %q", got, want)
			}
			for _, term := range terms {
				if !isClosed(term.Done()) {
					t.Fatalf("term %d still open after Lead returned", term.Token())
				}
			}
			if _, err := c.Holder(t.Context(), "job"); !errors.Is(err, lockclient.ErrNotHeld) {
				t.Fatalf("Holder after Lead = %v, want the lock released", err)
			}
		})
	}
}

// TestClient_Lead_panic: a panic in fn releases the term and passes on.
func TestClient_Lead_panic(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	obs := &termRecorder{}
	c := newClient(t, srv.Client(t), lockclient.WithObserver(obs))
	var term *lockclient.Lock
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		c.Lead(t.Context(), "job", func(l *lockclient.Lock) error { term = l; panic("boom") })
	}()
	if panicked != "boom" {
		t.Fatalf("recovered %v, want the panic re-raised", panicked)
	}
	if !isClosed(term.Done()) {
		t.Fatal("term still open after the panic")
	}
	if _, err := c.Holder(t.Context(), "job"); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("Holder after the panic = %v, want the lock released", err)
	}
	if got, want := obs.events(), []string{fmt.Sprintf("begun %d", term.Token()), fmt.Sprintf("ended %d panicked", term.Token())}; !slices.Equal(got, want) {
		t.Fatalf("terms %q, want %q", got, want)
	}
}

// TestClient_Lead_keyDeleted: an operator's release of the leader's key ends
// its term as lost within moments (the term watches its key), and Lead
// campaigns again, winning a new term with a higher token.
func TestClient_Lead_keyDeleted(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
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
	srv := shared.Cluster(t)
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
