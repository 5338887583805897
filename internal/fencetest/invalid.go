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
