package s3fence_test

import (
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

func TestStore_Put_stale(t *testing.T) {
	e := newEnv(t)
	v := e.put(t, "report", 5, "five")
	if v.Token != 5 || v.ETag == "" {
		t.Fatalf("Put() = %+v, want token 5 and an ETag", v)
	}
	if n := e.api.requests(); n != 2 {
		t.Fatalf("a fenced Put took %d requests, want 2 (HEAD + PUT)", n)
	}
	_, err := e.store.Put(t.Context(), fence.NewGrant("res", 3), e.input("report", "three"))
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Presented != 3 || se.Seen != 5 || se.Resource != "res" {
		t.Fatalf("Put(token 3) = %v, want *fence.StaleError 3 < 5", err)
	}
	if body, tok, _ := e.rawGet(t, "report"); body != "five" || tok != "5" {
		t.Fatalf("stored %q token %s after a stale Put, want five/5", body, tok)
	}
	tests := []struct {
		token fence.Token
		body  string
	}{{5, "five again"}, {9, "nine"}}
	for _, tt := range tests {
		e.put(t, "report", tt.token, tt.body)
		if body, tok, _ := e.rawGet(t, "report"); body != tt.body || tok != strconv.FormatInt(int64(tt.token), 10) {
			t.Fatalf("stored %q token %s, want %q token %d", body, tok, tt.body, tt.token)
		}
	}
}

// TestStore_Put_overPlainObject treats an object written without the package as
// token 0, and refuses to overwrite unreadable token metadata.
func TestStore_Put_overPlainObject(t *testing.T) {
	e := newEnv(t)
	for key, meta := range map[string]map[string]string{"plain": nil, "garbled": {s3fence.TokenKey: "seven"}, "zero": {s3fence.TokenKey: "0"}} {
		in := e.input(key, "by hand")
		in.Metadata = meta
		if _, err := e.raw.PutObject(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	e.put(t, "plain", 1, "fenced")
	if body, _, _ := e.rawGet(t, "plain"); body != "fenced" {
		t.Fatalf("plain object not replaced: %q", body)
	}
	for _, key := range []string{"garbled", "zero"} {
		if _, err := e.store.Put(t.Context(), fence.NewGrant("res", 1), e.input(key, "fenced")); !errors.Is(err, s3fence.ErrBadMetadata) {
			t.Errorf("Put over %s token = %v, want ErrBadMetadata", key, err)
		}
		if body, _, _ := e.rawGet(t, key); body != "by hand" {
			t.Errorf("%s object overwritten: %q", key, body)
		}
	}
}

func TestStore_Get_readModifyWrite(t *testing.T) {
	e := newEnv(t)
	g := fence.NewGrant("counter", 7)
	get := &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("counter")}
	if _, err := e.store.Get(t.Context(), g, get); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}
	first := e.put(t, "counter", 6, "1")
	obj, err := e.store.Get(t.Context(), g, get)
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	b, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if string(b) != "1" || obj.Version != first {
		t.Fatalf("Get() = %q %+v, want 1 %+v", b, obj.Version, first)
	}
	before := e.api.requests()
	v, err := e.store.PutIfMatch(t.Context(), g, e.input("counter", "2"), obj.Version)
	if err != nil || v.Token != 7 {
		t.Fatalf("PutIfMatch() = %+v, %v", v, err)
	}
	if n := e.api.requests() - before; n != 1 {
		t.Fatalf("PutIfMatch took %d requests, want 1", n)
	}
	// The same version again: the object moved on (same holder), so ErrChanged.
	if _, err := e.store.PutIfMatch(t.Context(), g, e.input("counter", "3"), obj.Version); !errors.Is(err, s3fence.ErrChanged) {
		t.Fatalf("PutIfMatch(old version) = %v, want ErrChanged", err)
	}
	// A newer holder writes: the old holder's read and its PutIfMatch are refused.
	e.put(t, "counter", 8, "10")
	var se *fence.StaleError
	if _, err := e.store.PutIfMatch(t.Context(), g, e.input("counter", "3"), v); !errors.As(err, &se) || se.Seen != 8 {
		t.Fatalf("PutIfMatch after a newer holder = %v, want stale with 8 seen", err)
	}
	if _, err := e.store.Get(t.Context(), g, get); !errors.As(err, &se) || se.Seen != 8 {
		t.Fatalf("Get after a newer holder = %v, want stale with 8 seen", err)
	}
	// A reader without a grant is not refused: it reads what is stored.
	if obj, err := e.store.Get(t.Context(), nil, get); err != nil || obj.Version.Token != 8 {
		t.Fatalf("Get(nil grant) = %v, want the object of token 8", err)
	} else {
		obj.Body.Close()
	}
	if _, err := e.store.PutIfMatch(t.Context(), g, e.input("counter", "3"), s3fence.Version{ETag: v.ETag, Token: 8}); !errors.As(err, &se) {
		t.Fatalf("PutIfMatch(prev token 8) = %v, want stale before any request", err)
	}
	if body, tok, _ := e.rawGet(t, "counter"); body != "10" || tok != "8" {
		t.Fatalf("stored %q token %s, want 10/8", body, tok)
	}
}

// TestStore_Delete_tombstone: a deleted key reads as not found, a stale holder can
// neither recreate it nor delete over a newer write, and a newer one can.
func TestStore_Delete_tombstone(t *testing.T) {
	e := newEnv(t)
	e.put(t, "state", 4, "v4")
	if err := e.store.Delete(t.Context(), fence.NewGrant("res", 6), e.bucket, "state"); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	if _, err := e.store.Head(t.Context(), e.bucket, "state"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Head(deleted) = %v", err)
	}
	if _, err := e.store.Get(t.Context(), nil, &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("state")}); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get(nil grant, deleted) = %v", err)
	}
	get := func(g fence.Grant) error {
		_, err := e.store.Get(t.Context(), g, &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("state")})
		return err
	}
	// Under a grant at least as new as the delete's, the key is not found; under an
	// older one, the reader learns its grant is stale (a newer holder deleted), as
	// its Put would.
	if err := get(fence.NewGrant("res", 6)); !errors.Is(err, fence.ErrNotFound) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("Get(grant 6, deleted at 6) = %v, want fence.ErrNotFound", err)
	}
	var se *fence.StaleError
	if err := get(fence.NewGrant("res", 5)); !errors.As(err, &se) || se.Seen != 6 {
		t.Fatalf("Get(grant 5, deleted at 6) = %v, want a *fence.StaleError with 6 seen", err)
	}
	if _, err := e.store.Put(t.Context(), fence.NewGrant("res", 5), e.input("state", "stale v5")); !errors.As(err, &se) || se.Seen != 6 {
		t.Fatalf("stale recreate = %v, want refused with 6 seen", err)
	}
	if err := e.store.Delete(t.Context(), fence.NewGrant("res", 5), e.bucket, "state"); !errors.As(err, &se) {
		t.Fatalf("stale Delete = %v, want refused", err)
	}
	before := e.api.puts.Load()
	if err := e.store.Delete(t.Context(), fence.NewGrant("res", 6), e.bucket, "state"); err != nil || e.api.puts.Load() != before {
		t.Fatalf("second Delete with the same token = %v, %d PUTs; want nil, none", err, e.api.puts.Load()-before)
	}
	e.put(t, "state", 6, "v6")
	if body, _, _ := e.rawGet(t, "state"); body != "v6" {
		t.Fatalf("recreated object %q", body)
	}
	// A key deleted before it ever existed remembers the token too.
	if err := e.store.Delete(t.Context(), fence.NewGrant("res", 9), e.bucket, "never"); err != nil {
		t.Fatalf("Delete(absent) = %v", err)
	}
	if _, err := e.store.Put(t.Context(), fence.NewGrant("res", 8), e.input("never", "stale")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale create after delete = %v", err)
	}
}

// TestStore_Put_contended: a competing writer lands between every HEAD and PUT, so
// each conditional PUT fails with 412; the write gives up after its attempt limit
// and the competitor's object stands. With competition on the first attempts only,
// the retry sends the whole body again.
func TestStore_Put_contended(t *testing.T) {
	tests := []struct {
		name      string
		interfere int // HEADs after which a competitor writes
		want      error
	}{
		{"always", 100, s3fence.ErrContended},
		{"twice", 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, s3fence.WithMaxAttempts(3))
			n := 0
			e.api.before = func(op string) {
				if op != "put" || n >= tt.interfere {
					return
				}
				n++
				in := e.input("k", "competitor "+strings.Repeat("x", n))
				in.Metadata = map[string]string{s3fence.TokenKey: "2"}
				if _, err := e.raw.PutObject(t.Context(), in); err != nil {
					t.Errorf("competing write: %v", err)
				}
			}
			body := strings.NewReader("0123456789 the whole body")
			body.Seek(2, io.SeekStart) // a body is sent from where it stood
			_, err := e.store.Put(t.Context(), fence.NewGrant("res", 3), &s3.PutObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("k"), Body: body})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Put() = %v, want %v", err, tt.want)
			}
			got, _, _ := e.rawGet(t, "k")
			switch {
			case tt.want != nil && !strings.HasPrefix(got, "competitor"):
				t.Fatalf("stored %q after a contended write gave up", got)
			case tt.want == nil && got != "23456789 the whole body":
				t.Fatalf("stored %q after retries", got)
			}
			if tt.want != nil && e.api.puts.Load() != 3 {
				t.Fatalf("%d PUTs, want the limit 3", e.api.puts.Load())
			}
		})
	}
}
