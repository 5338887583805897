package fencetest

import (
	"errors"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
)

// Invalid stands, in a test's table of wanted errors, for an error wrapping
// fence.ErrInvalidArgument whose message says msg: bad input of every kind shares
// that one sentinel, and the message tells the kinds apart. Match checks it.
func Invalid(msg string) error { return invalidArg(msg) }

type invalidArg string

func (e invalidArg) Error() string {
	return "an error wrapping fence.ErrInvalidArgument saying " + strconv.Quote(string(e))
}

// Match reports whether err is what want asks for: for a want made by Invalid, an
// error wrapping fence.ErrInvalidArgument that says its message; otherwise
// errors.Is(err, want).
func Match(err, want error) bool {
	if w, ok := want.(invalidArg); ok {
		return errors.Is(err, fence.ErrInvalidArgument) && strings.Contains(err.Error(), string(w))
	}
	return errors.Is(err, want)
}

// WrapsCause reports whether err, somewhere in its tree, wraps sentinel together
// with another error: a commit-unknown error and the driver's error behind it.
func WrapsCause(err, sentinel error) bool {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		errs := u.Unwrap()
		if len(errs) == 2 && errs[0] == sentinel && errs[1] != nil {
			return true
		}
		for _, e := range errs {
			if WrapsCause(e, sentinel) {
				return true
			}
		}
	case interface{ Unwrap() error }:
		return WrapsCause(u.Unwrap(), sentinel)
	}
	return false
}
