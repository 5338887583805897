// Package lockname holds the one rule for a lock's name, shared by lockclient (which
// refuses a bad name before any etcd request) and fencectl (which refuses it before
// any database or etcd request): a fence resource name without '/' or control
// characters.
package lockname

import (
	"fmt"
	"unicode"

	"github.com/fencegate/fencegate/fence"
)

// Check reports why name cannot name a lock (fence.ErrInvalidArgument), or nil.
func Check(name string) error {
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
