package lockclient

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// denied explains etcd's permission error, which names no key: with auth
// enabled, the user's role lacks readwrite on the Client's prefix. The result
// still matches rpctypes.ErrPermissionDenied.
func (c *Client) denied(err error) error {
	if errors.Is(err, rpctypes.ErrPermissionDenied) {
		return fmt.Errorf("etcd user may not read and write keys under %q (grant its role readwrite on that prefix): %w", c.prefix, err)
	}
	return err
}
