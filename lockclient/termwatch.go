package lockclient

import (
	"context"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchTerm watches the key of a leadership term, one etcd watch for the
// term's life, and ends the term as lost (cause fence.ErrLost, label
// key_deleted) as soon as etcd reports the key deleted or carrying another
// token. When the watch breaks (no leader, a member lost, history compacted),
// one linearizable read says whether the key still carries the token, and the
// watch resumes from that read's revision. stop ends the watch and waits for
// its goroutine.
func (c *Client) watchTerm(l *Lock) (stop func()) {
	ctx, cancel := context.WithCancel(l.ctx) // ends with the term, or by stop
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.followKey(ctx, l)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (c *Client) followKey(ctx context.Context, l *Lock) {
	key := c.key(l.name)
	rev := int64(l.token) + 1 // the key was created at the token's revision
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		gone, next := c.watchKeyGone(wctx, key, l.token, rev)
		cancel()
		if gone {
			c.keyGone(l)
			return
		}
		rev = next
		if ctx.Err() != nil {
			return
		}
		// The watch broke: read what is true now, then watch from there.
		resp, err := c.cli.Get(ctx, key)
		if err != nil {
			if c.sleep(ctx, retryDelay) != nil {
				return
			}
			continue
		}
		if len(resp.Kvs) == 0 || fence.Token(resp.Kvs[0].CreateRevision) != l.token {
			c.keyGone(l)
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// watchKeyGone watches key from rev until it is deleted or recreated (gone),
// or the watch ends; next is the revision to resume from.
func (c *Client) watchKeyGone(ctx context.Context, key string, token fence.Token, rev int64) (gone bool, next int64) {
	for wr := range c.cli.Watch(ctx, key, clientv3.WithRev(rev)) {
		if wr.Err() != nil || wr.Canceled {
			return false, rev
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE || fence.Token(ev.Kv.CreateRevision) != token {
				return true, rev
			}
			rev = ev.Kv.ModRevision + 1
		}
	}
	return false, rev
}

// keyGone ends l as lost because its key was deleted, if it is still held.
func (c *Client) keyGone(l *Lock) {
	c.mu.Lock()
	held := c.unregisterLocked(l)
	c.mu.Unlock()
	if held {
		l.lose(nil)
	}
}
