package lockclient

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/fence"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// NextToken returns the lowest token a lock granted after this call can carry:
// etcd's current revision + 1, from one linearizable read (a count of the keys
// under the Client's prefix). Every token granted before the call is lower, and
// every token granted after it is at least as high, by any Client of the
// cluster, for any name. ctx governs the read.
//
// It is the operator's fence: storing it as a resource's high-water token (see
// package adapters/fencemark) makes the database refuse the fenced writes of
// every holder granted before the call, whether or not anyone holds the lock,
// while the next holder's writes are accepted.
//
// It returns ErrClosed on a closed Client, or etcd's error.
func (c *Client) NextToken(ctx context.Context) (fence.Token, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	resp, err := c.cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("lockclient: read etcd's revision: %w", c.denied(err))
	}
	return fence.Token(resp.Header.Revision + 1), nil
}
