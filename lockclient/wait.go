package lockclient

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryDelay spaces retries after a transient etcd error (no leader, a member
// down), so a waiting Acquire does not spin while the cluster elects.
const retryDelay = 100 * time.Millisecond

// waitDelete watches key from the revision after rev until it is deleted (or the
// watch breaks, which the caller answers by trying again).
func (c *Client) waitDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, key, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	for {
		select {
		case <-c.done:
			c.mu.Lock()
			st := c.state
			c.mu.Unlock()
			return stateErr(st)
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return c.sleep(ctx, retryDelay)
			}
			if wr.Err() != nil {
				// Compacted, no leader, cancelled: the Txn tells what is true now.
				return c.sleep(ctx, retryDelay)
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		c.mu.Lock()
		st := c.state
		c.mu.Unlock()
		return stateErr(st)
	}
}
