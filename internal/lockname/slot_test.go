package lockname_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/lockname"
)

func TestParseSlot(t *testing.T) {
	for _, c := range []struct {
		name, slot, sem string
		i               int
		ok              bool
	}{
		{"first", "jobs/0000", "jobs", 0, true},
		{"last", "jobs/1023", "jobs", 1023, true},
		{"above the limit", "jobs/1024", "", 0, false},
		{"three digits", "jobs/001", "", 0, false},
		{"sign", "jobs/+001", "", 0, false},
		{"not digits", "jobs/abcd", "", 0, false},
		{"deeper", "jobs/0001/0002", "", 0, false},
		{"no semaphore", "/0001", "", 0, false},
		{"a lock", "jobs", "", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, i, ok := lockname.ParseSlot(c.slot)
			if sem != c.sem || i != c.i || ok != c.ok {
				t.Fatalf("ParseSlot(%q) = %q, %d, %v; want %q, %d, %v", c.slot, sem, i, ok, c.sem, c.i, c.ok)
			}
			if ok && lockname.Slot(sem, i) != c.slot {
				t.Fatalf("Slot(%q, %d) = %q", sem, i, lockname.Slot(sem, i))
			}
		})
	}
	if err := lockname.CheckLockOrSlot("jobs/0003"); err != nil {
		t.Fatalf("CheckLockOrSlot(slot) = %v", err)
	}
	if err := lockname.CheckLockOrSlot("jobs/x"); err == nil {
		t.Fatal("CheckLockOrSlot(jobs/x) = nil")
	}
}
