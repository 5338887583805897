package lockclient

import (
	"cmp"
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchSpec is what one wait follows: a key (or a key prefix) from a revision.
type watchSpec struct {
	key     string
	prefix  bool
	end     string // if set, the range's end: key up to end
	prevKV  bool   // events carry the key as it was before
	deletes bool   // only DELETE events
	rev     int64  // the first revision to watch; 0: reread first
	// event handles one event; true ends the wait.
	event func(ev *clientv3.Event) (done bool)
	// flush, if set, follows the events of each watch response (whole
	// revisions: etcd never splits one); true ends the wait.
	flush func() (done bool)
	// reread says what is true now, when etcd compacted the revision the wait
	// would resume from (or rev is 0): done, or the revision to resume from.
	reread func(ctx context.Context) (rev int64, done bool, err error)
}

// wait is the one wait of this package: it follows s.key from s.rev, handing
// each event to s.event until that says done (nil), ctx ends or the Client
// closes; a broken watch resumes after the last event, or where s.reread says.
func (c *Client) wait(ctx context.Context, s watchSpec) error {
	rev, compacted := s.rev, s.rev == 0
	for {
		if compacted {
			next, done, err := s.reread(ctx)
			switch {
			case err == nil && done:
				return nil
			case err == nil:
				rev = next
			case c.cli.Ctx().Err() != nil:
				return c.cli.Ctx().Err() // the etcd client was closed
			default:
				if err := c.sleep(ctx, retryDelay); err != nil {
					return err
				}
				continue
			}
		}
		done, lost, err := c.watchOnce(ctx, s, &rev)
		if done || err != nil {
			return err
		}
		if err := cmp.Or(ctx.Err(), c.cli.Ctx().Err()); err != nil {
			return err // ctx ended, or the etcd client was closed
		}
		if compacted = lost; !compacted {
			if err := c.sleep(ctx, retryDelay); err != nil {
				return err
			}
		}
	}
}

// watchOnce runs one etcd watch from *rev until an event says done, the watch
// breaks (compacted says whether etcd compacted *rev away) or the Client closes.
func (c *Client) watchOnce(ctx context.Context, s watchSpec, rev *int64) (done, compacted bool, err error) {
	// WithRequireLeader: a member cut off from its cluster ends the watch
	// instead of keeping it silent; it resumes on another.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(*rev)}
	switch {
	case s.prefix:
		opts = append(opts, clientv3.WithPrefix())
	case s.end != "":
		opts = append(opts, clientv3.WithRange(s.end))
	}
	if s.prevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	if s.deletes {
		opts = append(opts, clientv3.WithFilterPut())
	}
	wch := c.cli.Watch(wctx, s.key, opts...)
	for {
		select {
		case <-c.done:
			return false, false, c.sess.err()
		case wr, ok := <-wch:
			switch {
			case !ok:
				return false, false, nil
			case wr.CompactRevision != 0:
				return false, true, nil
			case wr.Err() != nil || wr.Canceled:
				return false, false, nil
			}
			for _, ev := range wr.Events {
				if s.event(ev) {
					return true, false, nil
				}
				*rev = ev.Kv.ModRevision + 1
			}
			if s.flush != nil && s.flush() {
				return true, false, nil
			}
		}
	}
}

// waitDeleted waits until key has been deleted after revision rev. When etcd
// compacted the history, it returns: the caller's next Txn tells what is true.
func (c *Client) waitDeleted(ctx context.Context, key string, rev int64) error {
	return c.wait(ctx, watchSpec{
		key: key, deletes: true, rev: rev + 1,
		event:  func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE },
		reread: func(context.Context) (int64, bool, error) { return 0, true, nil },
	})
}
