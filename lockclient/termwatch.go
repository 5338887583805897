package lockclient

import (
	"context"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchTerm watches the key of a leadership term, one etcd watch for the
// term's life (Client.wait), and ends the term as lost as soon as etcd reports
// the key deleted or carrying another token. stop ends the watch and waits for
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
	gone := func(kv *mvccpb.KeyValue) bool { return kv == nil || fence.Token(kv.CreateRevision) != l.token }
	err := c.wait(ctx, watchSpec{
		key: key, rev: int64(l.token) + 1, // the key was created at the token's revision
		event: func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE || gone(ev.Kv) },
		reread: func(ctx context.Context) (int64, bool, error) {
			resp, err := c.cli.Get(ctx, key)
			if err != nil {
				return 0, false, err
			}
			var kv *mvccpb.KeyValue
			if len(resp.Kvs) > 0 {
				kv = resp.Kvs[0]
			}
			return resp.Header.Revision + 1, gone(kv), nil
		},
	})
	if err == nil {
		c.keyGone(l)
	}
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
