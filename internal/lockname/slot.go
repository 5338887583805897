package lockname

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxSlots bounds a semaphore's slot indices: four decimal digits
// (AcquirePermit's largest n).
const MaxSlots = 1024

// slotDigits is the width of a slot's index in its name.
const slotDigits = 4

// Slot returns the name of slot i of the semaphore sem: "sem/0007". Lock names
// contain no "/", so a slot's name never clashes with a lock's.
func Slot(sem string, i int) string {
	return fmt.Sprintf("%s/%0*d", sem, slotDigits, i)
}

// ParseSlot splits a slot name into its semaphore and index; ok is false for
// any other name (a lock's, a bad one).
func ParseSlot(name string) (sem string, i int, ok bool) {
	sem, idx, found := strings.Cut(name, "/")
	if !found || len(idx) != slotDigits || strings.Trim(idx, "0123456789") != "" || Check(sem) != nil {
		return "", 0, false
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i >= MaxSlots {
		return "", 0, false
	}
	return sem, i, true
}

// CheckLockOrSlot is Check that also accepts a permit's slot name.
func CheckLockOrSlot(name string) error {
	if _, _, ok := ParseSlot(name); ok {
		return nil
	}
	return Check(name)
}
