package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
)

type lostGrant struct {
	fence.Grant
	done chan struct{}
}

func (g lostGrant) Done() <-chan struct{} { return g.done }

// recordingStore counts calls, so a test can prove a refused grant did no I/O.
type recordingStore struct{ calls int }

func (s *recordingStore) Fenced(ctx context.Context, g fence.Grant, fn func(int) error) error {
	s.calls++
	return fn(1)
}

func TestExec_refusesBadGrantsBeforeIO(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	tests := []struct {
		name  string
		grant fence.Grant
		want  error
		msg   string // what the message must say
	}{
		{"nil grant", nil, fence.ErrInvalidArgument, "nil grant"},
		{"empty resource", fence.NewGrant("", 3), fence.ErrInvalidArgument, "fence: invalid resource: empty resource name"},
		{"overlong resource", fence.NewGrant(strings.Repeat("a", 201), 3), fence.ErrInvalidArgument, "resource name is 201 bytes, the limit is 200"},
		{"not utf-8", fence.NewGrant("a\xff", 3), fence.ErrInvalidArgument, "is not UTF-8"},
		{"nul byte", fence.NewGrant("a\x00b", 3), fence.ErrInvalidArgument, "contains a NUL byte"},
		{"empty set", setGrant{fence.NewGrant("a", 3), nil}, fence.ErrInvalidArgument, "no resources"},
		{"bad set member", setGrant{fence.NewGrant("a", 3), []string{"a", ""}}, fence.ErrInvalidArgument, "empty resource name"},
		{"zero token", fence.NewGrant("account-42", 0), fence.ErrInvalidArgument, `fence: invalid token 0 for "account-42": tokens are > 0: fence: invalid argument`},
		{"negative token", fence.NewGrant("account-42", -5), fence.ErrInvalidArgument, `invalid token -5 for "account-42"`},
		{"lost lock", lostGrant{fence.NewGrant("account-42", 33), closed}, fence.ErrLost, `fence: lock lost: "account-42" at token 33`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &recordingStore{}
			err := fence.Exec(t.Context(), s, tt.grant, func(int) error { return nil })
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Exec() error = %v, want %v saying %q", err, tt.want, tt.msg)
			}
			if cerr := fence.CheckGrant(tt.grant); cerr == nil || cerr.Error() != err.Error() {
				t.Fatalf("CheckGrant() = %v, Exec() = %v", cerr, err)
			}
			if s.calls != 0 {
				t.Fatalf("store called %d times for a refused grant", s.calls)
			}
		})
	}
}

func TestExec_validGrant(t *testing.T) {
	s := &recordingStore{}
	live := lostGrant{fence.NewGrant("account-42", 33), make(chan struct{})}
	ran := false
	if err := fence.Exec(t.Context(), s, live, func(int) error { ran = true; return nil }); err != nil {
		t.Fatalf("Exec() = %v", err)
	}
	if !ran || s.calls != 1 {
		t.Fatalf("ran = %v, calls = %d; want true, 1", ran, s.calls)
	}
	if err := fence.Exec[int](t.Context(), nil, live, func(int) error { return nil }); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("nil store: %v", err)
	}
	if err := fence.Exec(t.Context(), s, live, nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("nil fn: %v", err)
	}
}

func TestStaleError(t *testing.T) {
	var err error = &fence.StaleError{Resource: "account-42", Presented: 33, Seen: 34}
	wrapped := errors.Join(errors.New("job"), err)
	if !errors.Is(wrapped, fence.ErrStale) {
		t.Fatal("StaleError does not match ErrStale")
	}
	var se *fence.StaleError
	if !errors.As(wrapped, &se) || se.Seen != 34 || se.Presented != 33 {
		t.Fatalf("errors.As = %+v", se)
	}
	if got := err.Error(); !strings.Contains(got, "33") || !strings.Contains(got, "34") || !strings.Contains(got, "account-42") {
		t.Fatalf("Error() = %q does not name resource and both tokens", got)
	}
	if errors.Is(err, fence.ErrNotFound) {
		t.Fatal("StaleError matches ErrNotFound")
	}
}

func TestTypedErrors_matchSentinels(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{&fence.StaleError{Resource: "r", Presented: 1, Seen: 2}, fence.ErrStale},
		{&fence.StaleError{Resource: "r", Presented: 1}, fence.ErrStale},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%T does not match %v", tt.err, tt.want)
		}
		if tt.err.Error() == "" || !strings.HasPrefix(tt.err.Error(), "fence: ") {
			t.Errorf("%T message %q", tt.err, tt.err.Error())
		}
	}
}

type setGrant struct {
	fence.Grant
	res []string
}

func (s setGrant) Resources() []string { return s.res }

func TestCheckResource(t *testing.T) {
	if err := fence.CheckResource("account-42"); err != nil {
		t.Fatalf("CheckResource(account-42) = %v", err)
	}
	if err := fence.CheckResource(strings.Repeat("a", 200)); err != nil {
		t.Fatalf("CheckResource of 200 bytes = %v", err)
	}
	tests := []struct{ name, resource, msg string }{
		{"empty", "", "fence: invalid resource: empty resource name"},
		{"too long", strings.Repeat("a", 201), "fence: invalid resource: resource name is 201 bytes, the limit is 200"},
		{"not UTF-8", "a\xff", `fence: invalid resource: resource name "a\xff" is not UTF-8`},
		{"NUL", "a\x00", `fence: invalid resource: resource name "a\x00" contains a NUL byte`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fence.CheckResource(tt.resource)
			if !errors.Is(err, fence.ErrInvalidArgument) || err.Error() != tt.msg {
				t.Fatalf("CheckResource(%q) = %v, want %q matching fence.ErrInvalidArgument", tt.resource, err, tt.msg)
			}
		})
	}
}
