package lockname_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name, lock string
		ok         bool
	}{
		{"plain", "jobs-1", true},
		{"unicode", "facture-é", true},
		{"empty", "", false},
		{"slash", "jobs/1", false},
		{"control character", "jobs\n1", false},
		{"not UTF-8", "jobs\xff", false},
		{"too long", strings.Repeat("a", 10000), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := lockname.Check(c.lock)
			if c.ok != (err == nil) {
				t.Fatalf("Check(%q) = %v, want ok %v", c.lock, err, c.ok)
			}
			if err != nil && !errors.Is(err, fence.ErrInvalidArgument) {
				t.Fatalf("Check(%q) = %v, want fence.ErrInvalidArgument", c.lock, err)
			}
		})
	}
}

// TestCheck_readsOnce: a refused name's error, wrapped as lockclient and fencectl
// wrap it, says "fence:" and "invalid" at most once, and still matches the sentinel.
func TestCheck_readsOnce(t *testing.T) {
	for _, c := range []struct{ name, lock string }{
		{"empty", ""},
		{"slash", "jobs/1"},
		{"control character", "jobs\n1"},
		{"not UTF-8", "jobs\xff"},
		{"NUL", "jobs\x00"},
		{"too long", strings.Repeat("a", 201)},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := fmt.Errorf("lockclient: %w", lockname.Check(c.lock))
			if !errors.Is(err, fence.ErrInvalidArgument) {
				t.Fatalf("%v: not fence.ErrInvalidArgument", err)
			}
			for _, word := range []string{"fence:", "invalid", "lock name"} {
				if n := strings.Count(err.Error(), word); n > 1 {
					t.Errorf("%q says %q %d times", err, word, n)
				}
			}
		})
	}
}
