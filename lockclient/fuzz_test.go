package lockclient_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// FuzzLockName checks lock name validation (the check of Acquire, Release and
// Holder) against its specification: a name is accepted exactly when it is 1 to
// 200 bytes of UTF-8 without a slash or a control character,
// and a refusal matches fence.ErrInvalidArgument, says it is the lock name, and
// quotes the name safely (no
// raw control characters in the message, which goes to logs).
func FuzzLockName(f *testing.F) {
	for _, s := range []string{"invoice-42", "", "a/b", "x\x00y", "tab\there", "line\nbreak", "naïve-ünïcode", "\xff\xfe", "'; DROP TABLE fence_tokens; --", "\u202eevil", strings.Repeat("a", 200+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := lockclient.CheckLockName(name)
		valid := name != "" && len(name) <= 200 && utf8.ValidString(name) &&
			!strings.ContainsRune(name, '/') && strings.IndexFunc(name, unicode.IsControl) < 0
		if valid != (err == nil) {
			t.Fatalf("CheckLockName(%q) = %v, but the name is valid: %v", name, err, valid)
		}
		if err == nil {
			return
		}
		if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "lock name") {
			t.Fatalf("CheckLockName(%q) = %v: does not match fence.ErrInvalidArgument naming the lock name", name, err)
		}
		if strings.IndexFunc(err.Error(), func(r rune) bool { return unicode.IsControl(r) }) >= 0 {
			t.Fatalf("CheckLockName(%q): message %q holds a raw control character", name, err)
		}
	})
}
