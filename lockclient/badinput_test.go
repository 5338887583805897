package lockclient_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

func TestNew_badOptions(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	tests := []struct {
		name string
		opts []lockclient.Option
		msg  string // a word the error must contain, naming the problem
	}{
		{"TTL under minimum", []lockclient.Option{lockclient.WithTTL(500 * time.Millisecond)}, "minimum"},
		{"TTL zero", []lockclient.Option{lockclient.WithTTL(0)}, "minimum"},
		{"TTL not whole seconds", []lockclient.Option{lockclient.WithTTL(2500 * time.Millisecond)}, "whole"},
		{"interval equal to TTL", []lockclient.Option{lockclient.WithTTL(3 * time.Second), lockclient.WithRenewInterval(3 * time.Second)}, "not under the TTL"},
		{"interval over default TTL", []lockclient.Option{lockclient.WithRenewInterval(time.Minute)}, "not under the TTL"},
		{"interval zero", []lockclient.Option{lockclient.WithRenewInterval(0)}, "not positive"},
		{"interval negative", []lockclient.Option{lockclient.WithRenewInterval(-time.Second)}, "not positive"},
		{"empty prefix", []lockclient.Option{lockclient.WithPrefix("")}, "empty"},
		{"prefix without slash", []lockclient.Option{lockclient.WithPrefix("/locks")}, "end with"},
		{"prefix with control char", []lockclient.Option{lockclient.WithPrefix("/lo\ncks/")}, "control"},
		{"empty identity", []lockclient.Option{lockclient.WithIdentity("")}, "empty"},
		{"long identity", []lockclient.Option{lockclient.WithIdentity(strings.Repeat("x", 201))}, "limit"},
		{"identity with control char", []lockclient.Option{lockclient.WithIdentity("a\tb")}, "control"},
		{"nil option", []lockclient.Option{nil}, "nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := lockclient.New(cli, tt.opts...)
			if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("New() = %v, %v; want fence.ErrInvalidArgument mentioning %q", c, err, tt.msg)
			}
		})
	}
	if _, err := lockclient.New(nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("New(nil) = %v, want fence.ErrInvalidArgument", err)
	}
	if _, err := lockclient.New(cli, lockclient.WithTTL(2*time.Second), lockclient.WithRenewInterval(1900*time.Millisecond)); err != nil {
		t.Fatalf("New with interval just under TTL: %v", err)
	}
}

func TestClient_badNames(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	tests := []struct {
		name, lock, msg string
	}{
		{"empty", "", "lock name: fence: invalid resource: empty resource name"},
		{"slash", "accounts/42", `lock name "accounts/42" contains a slash`},
		{"newline", "account\n42", "contains control character U+000A"},
		{"nul", "account\x0042", "contains a NUL byte"},
		{"DEL", "account\x7f", "contains control character U+007F"},
		{"not utf-8", "account\xff", "is not UTF-8"},
		{"too long", strings.Repeat("a", 200+1), "resource name is 201 bytes, the limit is 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := map[string]error{}
			_, calls["Acquire"] = c.Acquire(t.Context(), tt.lock)
			_, calls["TryAcquire"] = c.TryAcquire(t.Context(), tt.lock)
			calls["Release"] = c.Release(t.Context(), tt.lock, 5)
			_, calls["Holder"] = c.Holder(t.Context(), tt.lock)
			for call, err := range calls {
				if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("%s(%q) = %v; want fence.ErrInvalidArgument mentioning %q", call, tt.lock, err, tt.msg)
				}
			}
		})
	}
	if _, err := c.TryAcquire(t.Context(), strings.Repeat("a", 200)); err != nil {
		t.Fatalf("longest name refused: %v", err)
	}
}

func TestClient_badLockOptions(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	tests := []struct {
		name string
		opts []lockclient.LockOption
		msg  string
	}{
		{"lease under minimum", []lockclient.LockOption{lockclient.WithManualRenewal(500 * time.Millisecond)}, "minimum"},
		{"negative lease", []lockclient.LockOption{lockclient.WithManualRenewal(-time.Second)}, "minimum"},
		{"nil option", []lockclient.LockOption{nil}, "nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, try := range []bool{false, true} {
				var err error
				if try {
					_, err = c.TryAcquire(t.Context(), "job", tt.opts...)
				} else {
					_, err = c.Acquire(t.Context(), "job", tt.opts...)
				}
				if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("acquire (try %v) = %v; want fence.ErrInvalidArgument mentioning %q", try, err, tt.msg)
				}
			}
		})
	}
}

func TestClient_Release_badTokenAndNotHeld(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	for _, tok := range []fence.Token{0, -1} {
		want := fmt.Sprintf(`fence: invalid token %d for "job": tokens are > 0`, tok)
		if err := c.Release(t.Context(), "job", tok); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Release(token %d) = %v, want fence.ErrInvalidArgument saying %q", tok, err, want)
		}
	}
	var nh *lockclient.NotHeldError
	if err := c.Release(t.Context(), "job", 12345); !errors.As(err, &nh) || nh.Current != 0 {
		t.Fatalf("Release of a lock nobody holds = %v, want *NotHeldError with Current 0", err)
	}
}

func TestClient_closed(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	for _, used := range []bool{false, true} {
		c := newClient(t, srv.Client(t))
		if used {
			mustAcquire(t, c, "job")
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		calls := map[string]error{}
		_, calls["Acquire"] = c.Acquire(t.Context(), "job")
		_, calls["TryAcquire"] = c.TryAcquire(t.Context(), "job")
		calls["Release"] = c.Release(t.Context(), "job", 5)
		_, calls["Holder"] = c.Holder(t.Context(), "job")
		_, calls["List"] = c.List(t.Context())
		for call, err := range calls {
			if !errors.Is(err, lockclient.ErrClosed) {
				t.Errorf("%s on a closed client (used %v) = %v, want ErrClosed", call, used, err)
			}
		}
	}
}
