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

// FuzzCheckName checks CheckName against its specification: a name is accepted
// exactly when it is 1 to MaxNameLen bytes of UTF-8 without a slash or a control
// character, and a refusal matches both ErrInvalidName and
// fence.ErrInvalidResource and quotes the name safely (no raw control
// characters in the message, which goes to logs).
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"invoice-42", "", "a/b", "x\x00y", "tab\there", "line\nbreak", "naïve-ünïcode", "\xff\xfe", "'; DROP TABLE fence_tokens; --", "\u202eevil", strings.Repeat("a", lockclient.MaxNameLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := lockclient.CheckName(name)
		valid := name != "" && len(name) <= lockclient.MaxNameLen && utf8.ValidString(name) &&
			!strings.ContainsRune(name, '/') && strings.IndexFunc(name, unicode.IsControl) < 0
		if valid != (err == nil) {
			t.Fatalf("CheckName(%q) = %v, but the name is valid: %v", name, err, valid)
		}
		if err == nil {
			return
		}
		if !errors.Is(err, lockclient.ErrInvalidName) || !errors.Is(err, fence.ErrInvalidResource) {
			t.Fatalf("CheckName(%q) = %v: matches neither ErrInvalidName nor fence.ErrInvalidResource", name, err)
		}
		if strings.IndexFunc(err.Error(), func(r rune) bool { return unicode.IsControl(r) }) >= 0 {
			t.Fatalf("CheckName(%q): message %q holds a raw control character", name, err)
		}
	})
}
