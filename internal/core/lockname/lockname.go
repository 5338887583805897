// Package lockname holds the rule for lock names, shared by lockclient, which
// refuses a bad name before any I/O, and fencectl, which tells lock names from
// other resources: a resource name (fence.CheckResource) without slashes, which
// would reach into other keys under the prefix, or control characters, which
// would garble logs and listings.
package lockname

import (
	"fmt"
	"unicode"

	"github.com/fencegate/fencegate/fence"
)

// Check reports why name cannot name a lock, or nil. Its errors wrap
// fence.ErrInvalidArgument.
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
