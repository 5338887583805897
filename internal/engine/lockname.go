package engine

import (
	"fmt"
	"unicode"

	"github.com/fencegate/fencegate/fence"
)

// CheckLockName reports why name cannot name a lock, or nil. Its errors wrap
// fence.ErrInvalidArgument.
func CheckLockName(name string) error {
	if err := fence.CheckResource(name); err != nil {
		return fmt.Errorf("lock name: %w", err)
	}
	for _, r := range name {
		switch {
		case r == '/':
			return fmt.Errorf("lock name %q contains a slash: %w", name, fence.ErrInvalidArgument)
		case unicode.IsControl(r):
			return fmt.Errorf("lock name %q contains control character %U: %w", name, r, fence.ErrInvalidArgument)
		}
	}
	return nil
}
