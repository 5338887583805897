package s3fence_test

import (
	"errors"
	"testing"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/fence"
)

// TestStore_Put_newerWriteBetweenHeadAndPut lets a newer holder write between a
// stale holder's HEAD and its PUT. With new bytes the stale PUT's If-Match fails, the
// write reads again and is refused. With the very bytes the stale holder read, the
// ETag (a hash of the bytes) is unchanged and the stale PUT lands: the A-B-A the
// package doc describes, and the reason recurring content should carry its token.
func TestStore_Put_newerWriteBetweenHeadAndPut(t *testing.T) {
	tests := []struct {
		name      string
		newer     string // what the newer holder writes
		staleWins bool
	}{
		{"new bytes", "state: busy (token 9)", false},
		{"same bytes", "state: idle", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.put(t, "state", 3, "state: idle")
			newer, err := s3fence.New(e.raw)
			if err != nil {
				t.Fatal(err)
			}
			once := false
			e.api.before = func(op string) {
				if op != "put" || once {
					return
				}
				once = true
				if _, err := newer.Put(t.Context(), fence.NewGrant("res", 9), e.input("state", tt.newer)); err != nil {
					t.Errorf("newer Put: %v", err)
				}
			}
			_, err = e.store.Put(t.Context(), fence.NewGrant("res", 5), e.input("state", "state: busy (token 5)"))
			body, tok, _ := e.rawGet(t, "state")
			if tt.staleWins {
				if err != nil || tok != "5" {
					t.Fatalf("Put() = %v, stored %q token %s; the doc says this stale write lands", err, body, tok)
				}
				return
			}
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Seen != 9 || body != tt.newer || tok != "9" {
				t.Fatalf("Put() = %v, stored %q token %s; want refused with 9 seen and the newer object", err, body, tok)
			}
		})
	}
}
