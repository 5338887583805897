package lockclient

import "github.com/fencegate/fencegate/internal/lockname"

// semaphoreMark is the value of a semaphore's own key (its name's lock key),
// put without a lease by its first AcquirePermit in the same Txn as the permit.
// It makes the name a semaphore for good: Acquire finds the key and, reading
// this value, refuses the name, and AcquirePermit refuses a name whose key
// holds a lock, both decided by the Txn's compare in etcd. Delete it (fencectl
// release) only when no permit is held, to use the name as a lock again.
const semaphoreMark = `{"semaphore":true}`

// slotName is the name of slot i of the semaphore name: "name/0007".
func slotName(name string, i int) string { return lockname.Slot(name, i) }

// slotIndex returns the index of slot, when slot is a slot name of sem.
func slotIndex(slot, sem string) (int, bool) {
	s, i, ok := lockname.ParseSlot(slot)
	return i, ok && s == sem
}

// semaphoreOf returns the semaphore of a slot name, or "" for any other name.
func semaphoreOf(name string) string {
	s, _, _ := lockname.ParseSlot(name)
	return s
}

// checkLockName accepts a lock's name or a permit's slot name (what Release,
// Holder and Watch take), else says why not (checkName's error).
func checkLockName(name string) error {
	if semaphoreOf(name) != "" {
		return nil
	}
	return checkName(name)
}

// isMark reports whether a lock key's value is a semaphore's mark.
func isMark(val []byte) bool { return string(val) == semaphoreMark }

// semaphoreErr is the error of Acquire (or Holder) on a semaphore's name.
func semaphoreErr(op, name string) error {
	return invalid("%s(%q): %q is a semaphore (AcquirePermit; List shows its permits), not a lock", op, name, name)
}
