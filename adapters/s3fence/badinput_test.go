package s3fence_test

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/fence"
)

func TestNew_badInput(t *testing.T) {
	var typedNil *s3.Client
	tests := []struct {
		name string
		api  s3fence.API
		opts []s3fence.Option
		want error
	}{
		{"nil client", nil, nil, fence.ErrInvalidArgument},
		{"typed nil client", typedNil, nil, fence.ErrInvalidArgument},
		{"zero attempts", &s3.Client{}, []s3fence.Option{s3fence.WithMaxAttempts(0)}, fence.ErrInvalidArgument},
		{"too many attempts", &s3.Client{}, []s3fence.Option{s3fence.WithMaxAttempts(101)}, fence.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := s3fence.New(tt.api, tt.opts...)
			if !errors.Is(err, tt.want) || s != nil {
				t.Fatalf("New() = %v, %v; want nil, %v", s, err, tt.want)
			}
			if len(tt.opts) > 0 && !strings.Contains(err.Error(), "WithMaxAttempts") {
				t.Fatalf("New() error %q does not name the option", err)
			}
		})
	}
	// A nil Option is ignored, among valid ones.
	s, err := s3fence.New(&s3.Client{}, nil, s3fence.WithMaxAttempts(3), nil)
	if err != nil || s == nil {
		t.Fatalf("New(client, nil, WithMaxAttempts(3), nil) = %v, %v; want a Store", s, err)
	}
}

// onlyReader hides a body's Seek.
type onlyReader struct{ io.Reader }

// TestStore_badInput refuses every unusable grant and input before any request:
// the counting client sees none, and nothing is stored.
func TestStore_badInput(t *testing.T) {
	e := newEnv(t)
	good := fence.NewGrant("report", 5)
	lost := newWatched("report", 5)
	lost.lose()
	var nilBody *bytes.Reader
	in := func(mod func(*s3.PutObjectInput)) *s3.PutObjectInput {
		p := e.input("k", "body")
		if mod != nil {
			mod(p)
		}
		return p
	}
	tests := []struct {
		name  string
		grant fence.Grant
		in    *s3.PutObjectInput
		want  error
	}{
		{"nil grant", nil, in(nil), fence.ErrInvalidArgument},
		{"typed nil grant", (*watched)(nil), in(nil), fence.ErrInvalidArgument},
		{"empty resource", fence.NewGrant("", 5), in(nil), invalidArg("invalid resource: empty resource name")},
		{"zero token", fence.NewGrant("report", 0), in(nil), invalidArg(`fence: invalid token 0 for "report"`)},
		{"negative token", fence.NewGrant("report", -3), in(nil), invalidArg(`fence: invalid token -3 for "report"`)},
		{"lost lock", lost, in(nil), fence.ErrLost},
		{"set of resources", set{good}, in(nil), fence.ErrInvalidArgument},
		{"nil input", good, nil, fence.ErrInvalidArgument},
		{"nil bucket", good, in(func(p *s3.PutObjectInput) { p.Bucket = nil }), fence.ErrInvalidArgument},
		{"empty bucket", good, in(func(p *s3.PutObjectInput) { p.Bucket = aws.String("") }), fence.ErrInvalidArgument},
		{"empty key", good, in(func(p *s3.PutObjectInput) { p.Key = aws.String("") }), fence.ErrInvalidArgument},
		{"if-match set", good, in(func(p *s3.PutObjectInput) { p.IfMatch = aws.String(`"x"`) }), fence.ErrInvalidArgument},
		{"if-none-match set", good, in(func(p *s3.PutObjectInput) { p.IfNoneMatch = aws.String("*") }), fence.ErrInvalidArgument},
		{"reserved token key", good, in(func(p *s3.PutObjectInput) { p.Metadata = map[string]string{"Fence-Token": "9"} }), fence.ErrInvalidArgument},
		{"reserved tombstone key", good, in(func(p *s3.PutObjectInput) { p.Metadata = map[string]string{s3fence.TombstoneKey: "true"} }), fence.ErrInvalidArgument},
		{"body cannot seek", good, in(func(p *s3.PutObjectInput) { p.Body = onlyReader{strings.NewReader("x")} }), fence.ErrInvalidArgument},
		{"typed nil body", good, in(func(p *s3.PutObjectInput) { p.Body = nilBody }), fence.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.store.Put(t.Context(), tt.grant, tt.in); !matchErr(err, tt.want) {
				t.Errorf("Put() = %v, want %v", err, tt.want)
			}
			if tt.in != nil {
				if _, err := e.store.PutIfMatch(t.Context(), tt.grant, tt.in, s3fence.Version{ETag: `"x"`, Token: 1}); !matchErr(err, tt.want) {
					t.Errorf("PutIfMatch() = %v, want %v", err, tt.want)
				}
			}
			if n := e.api.requests(); n != 0 {
				t.Fatalf("%d requests sent for refused input", n)
			}
		})
	}
	delTests := []struct {
		name        string
		grant       fence.Grant
		bucket, key string
		want        error
	}{
		{"delete nil grant", nil, e.bucket, "k", fence.ErrInvalidArgument},
		{"delete zero token", fence.NewGrant("report", 0), e.bucket, "k", invalidArg(`fence: invalid token 0 for "report"`)},
		{"delete lost lock", lost, e.bucket, "k", fence.ErrLost},
		{"delete set", set{good}, e.bucket, "k", fence.ErrInvalidArgument},
		{"delete empty bucket", good, "", "k", fence.ErrInvalidArgument},
		{"delete empty key", good, e.bucket, "", fence.ErrInvalidArgument},
	}
	for _, tt := range delTests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.store.Delete(t.Context(), tt.grant, tt.bucket, tt.key); !matchErr(err, tt.want) {
				t.Errorf("Delete() = %v, want %v", err, tt.want)
			}
			if n := e.api.requests(); n != 0 {
				t.Fatalf("%d requests sent for refused input", n)
			}
		})
	}
	t.Run("reads", func(t *testing.T) {
		if _, err := e.store.Get(t.Context(), lost, &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("k")}); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Get(lost) = %v", err)
		}
		if _, err := e.store.Get(t.Context(), good, nil); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("Get(nil) = %v", err)
		}
		if _, err := e.store.Get(t.Context(), nil, &s3.GetObjectInput{Bucket: aws.String(e.bucket)}); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("Get(nil grant, no key) = %v", err)
		}
		var nilGrant *watched
		if _, err := e.store.Get(t.Context(), nilGrant, &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("k")}); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("Get(typed-nil grant) = %v", err)
		}
		if _, err := e.store.Head(t.Context(), "", "k"); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("Head(no bucket) = %v", err)
		}
		if _, err := e.store.PutIfMatch(t.Context(), good, e.input("k", "x"), s3fence.Version{}); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("PutIfMatch(no ETag) = %v", err)
		}
		var nilStore *s3fence.Store
		if _, err := nilStore.Put(t.Context(), good, e.input("k", "x")); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("nil Store Put = %v", err)
		}
		if n := e.api.requests(); n != 0 {
			t.Fatalf("%d requests sent for refused input", n)
		}
	})
	if _, _, found := e.rawGet(t, "k"); found {
		t.Fatal("an object was stored for refused input")
	}
}

// TestStore_Put_lostBetweenRequests loses the lock after the HEAD: the PUT is not
// sent and nothing is stored.
func TestStore_Put_lostBetweenRequests(t *testing.T) {
	e := newEnv(t)
	g := newWatched("report", 4)
	e.api.before = func(op string) {
		if op == "head" {
			g.lose()
		}
	}
	_, err := e.store.Put(t.Context(), g, e.input("k", "stale"))
	if !errors.Is(err, fence.ErrLost) || !strings.Contains(err.Error(), "at token 4") {
		t.Fatalf("Put() = %v, want fence.ErrLost for token 4", err)
	}
	if e.api.puts.Load() != 0 {
		t.Fatal("PUT sent after the lock was lost")
	}
	if _, _, found := e.rawGet(t, "k"); found {
		t.Fatal("object stored by a lost lock")
	}
}

// invalidArg wants an error wrapping fence.ErrInvalidArgument that says its text.
type invalidArg string

func (e invalidArg) Error() string {
	return "fence.ErrInvalidArgument saying " + strconv.Quote(string(e))
}

// matchErr reports whether err is what want asks for: an invalidArg's, or
// errors.Is(err, want).
func matchErr(err, want error) bool {
	if w, ok := want.(invalidArg); ok {
		return errors.Is(err, fence.ErrInvalidArgument) && strings.Contains(err.Error(), string(w))
	}
	return errors.Is(err, want)
}
