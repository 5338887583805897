package lockname_test

import (
	"errors"
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
