package nolock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/nolock"
)

func TestTypedErrors_matchSentinels(t *testing.T) {
	cause := errors.New("driver: 23505")
	tests := []struct {
		err  error
		want error
	}{
		{&nolock.DuplicateError{Table: "users", Constraint: "users_name_key", Err: cause}, nolock.ErrDuplicate},
		{&nolock.DuplicateError{Table: "users", Err: cause}, cause},
		{&nolock.DuplicateError{Table: "users"}, nolock.ErrDuplicate},
	}
	for _, tt := range tests {
		if !errors.Is(errors.Join(errors.New("job"), tt.err), tt.want) {
			t.Errorf("%T does not match %v", tt.err, tt.want)
		}
		if !strings.HasPrefix(tt.err.Error(), "nolock: ") {
			t.Errorf("%T message %q", tt.err, tt.err.Error())
		}
	}
	var de *nolock.DuplicateError
	if !errors.As(&nolock.DuplicateError{Table: "users"}, &de) || de.Table != "users" {
		t.Fatal("errors.As(*DuplicateError) failed")
	}
	if errors.Is(&nolock.DuplicateError{}, nolock.ErrInsufficient) {
		t.Fatal("DuplicateError matches ErrInsufficient")
	}
}
