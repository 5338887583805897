package lockclient

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryDelay spaces retries after a transient etcd error (no leader, a member
// down), so a waiting Acquire does not spin while the cluster elects.
const retryDelay = 100 * time.Millisecond

// watchSpec is what one wait follows: a key (or a key prefix) from a revision.
type watchSpec struct {
	key     string
	prefix  bool
	prevKV  bool  // events carry the key as it was before
	deletes bool  // only DELETE events
	rev     int64 // the first revision to watch; 0: reread first
	// event handles one event; true ends the wait.
	event func(ev *clientv3.Event) (done bool)
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
	if s.prefix {
		opts = append(opts, clientv3.WithPrefix())
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
			return false, false, c.closedErr()
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

// sleep waits d, or returns ctx's error or the Client's (closed, session lost).
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.closedErr()
	}
}

// Watch reports every change of the holder of lock name, in etcd's order, on
// the returned channel until ctx ends or the Client closes: first the state
// (Initial: EventTaken or EventFree), then each grant and each end of a hold.
// It resumes without a gap or a repeat; after a compaction it rereads the
// state (Reread). Telling EventReleased from EventExpired costs a read per
// deleted key, two for an expiry. A reader that stops reading holds the watch back, not etcd.
//
// Errors, before any I/O: fence.ErrInvalidArgument for a bad name; ErrClosed.
func (c *Client) Watch(ctx context.Context, name string) (<-chan Event, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return c.startWatch(ctx, name, false)
}

// WatchPrefix is Watch for every lock whose name starts with prefix ("": every
// lock), on one etcd watch; its Initial events are the held locks only.
func (c *Client) WatchPrefix(ctx context.Context, prefix string) (<-chan Event, error) {
	if prefix != "" {
		if err := checkName(prefix); err != nil {
			return nil, err
		}
	}
	return c.startWatch(ctx, prefix, true)
}

func (c *Client) startWatch(ctx context.Context, name string, prefix bool) (<-chan Event, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{c: c, name: name, key: c.key(name), prefix: prefix, out: make(chan Event, 16), held: map[string]*mvccpb.KeyValue{}}
	go func() {
		select {
		case <-c.done: // Close
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer close(w.out)
		defer cancel()
		w.run(ctx)
	}()
	return w.out, nil
}

// watcher is the state of one Watch: the holders it last reported, by name,
// and the revision to resume from. It runs on its own goroutine.
type watcher struct {
	c       *Client
	name    string // the name, or the name prefix
	key     string // the key, or the key prefix
	prefix  bool
	out     chan Event
	held    map[string]*mvccpb.KeyValue // the key of each name held, as last reported
	rev     int64                       // the revision after the last read; 0 before the first
	gone    map[int64]bool              // expired, by lease, among the deletes at goneRev
	goneRev int64
}

func (w *watcher) run(ctx context.Context) {
	w.c.wait(ctx, watchSpec{
		key: w.key, prefix: w.prefix, prevKV: true,
		event: func(ev *clientv3.Event) bool { return !w.apply(ctx, ev) },
		reread: func(ctx context.Context) (int64, bool, error) {
			err := w.read(ctx)
			return w.rev, ctx.Err() != nil, err
		},
	})
}

// apply reports one etcd event; false when ctx ended first.
func (w *watcher) apply(ctx context.Context, ev *clientv3.Event) bool {
	name, ok := w.nameOf(ev.Kv.Key)
	if !ok {
		return true
	}
	old := w.held[name]
	if ev.Type == mvccpb.PUT {
		w.held[name] = ev.Kv
		if old != nil && old.CreateRevision == ev.Kv.CreateRevision {
			return true // the same hold's key written again
		}
		return w.emit(ctx, Event{Type: EventTaken, Name: name, Holder: decodeInfo(name, ev.Kv), Revision: ev.Kv.ModRevision})
	}
	delete(w.held, name)
	if ev.PrevKv != nil {
		old = ev.PrevKv
	}
	if old == nil {
		return true // a key this watch never saw held: nothing it reported ends
	}
	return w.ended(ctx, name, old, ev.Kv.ModRevision, false)
}

// ended reports the end of the hold whose key was kv, found at rev.
func (w *watcher) ended(ctx context.Context, name string, kv *mvccpb.KeyValue, rev int64, reread bool) bool {
	expired, ok := w.expired(ctx, kv.Lease, rev, reread)
	if !ok {
		return false
	}
	typ := EventReleased
	if expired {
		typ = EventExpired
	}
	return w.emit(ctx, Event{Type: typ, Name: name, Holder: decodeInfo(name, kv), Revision: rev, Reread: reread})
}

// expired tells whether a key of lease deleted at rev went with the lease
// (retried until etcd answers or ctx ends), once per lease among the deletes
// of one revision: the keys of one expired lease are deleted together.
func (w *watcher) expired(ctx context.Context, lease, rev int64, reread bool) (expired, ok bool) {
	if lease == 0 {
		return false, true
	}
	if rev != w.goneRev {
		w.gone, w.goneRev = map[int64]bool{}, rev
	}
	if g, ok := w.gone[lease]; ok {
		return g, true
	}
	for {
		g, err := w.leaseEnded(ctx, lease, rev, reread)
		if err == nil {
			w.gone[lease] = g
			return g, true
		}
		if w.c.sleep(ctx, retryDelay) != nil {
			return false, false
		}
	}
}

// leaseEnded reads the lease's session key (sessionKey) at rev: there, the
// lease outlived the delete (a release); gone at rev but there just before, it
// went with the key (an expiry). Without that history (compacted, a reread, a
// session key never stored) it asks etcd whether the lease still exists.
func (w *watcher) leaseEnded(ctx context.Context, lease, rev int64, reread bool) (bool, error) {
	key := sessionKey(w.c.prefix, lease)
	at, err := w.c.cli.Get(ctx, key, clientv3.WithRev(rev), clientv3.WithKeysOnly())
	switch {
	case err != nil && !errors.Is(err, rpctypes.ErrCompacted):
		return false, err
	case err == nil && len(at.Kvs) > 0:
		return false, nil
	case err == nil && !reread:
		before, err := w.c.cli.Get(ctx, key, clientv3.WithRev(rev-1), clientv3.WithKeysOnly())
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			return false, err
		}
		if err == nil && len(before.Kvs) > 0 {
			return true, nil
		}
	}
	resp, err := w.c.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return false, err
	}
	return resp.TTL < 0, nil
}

// read reads the current state and reports how it differs from what was last
// reported: the first events of the watch, or, after a compaction, the ends and
// grants that the lost history held.
func (w *watcher) read(ctx context.Context) error {
	var opts []clientv3.OpOption
	if w.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := w.c.cli.Get(ctx, w.key, opts...)
	if err != nil {
		return err
	}
	initial, rev := w.rev == 0, resp.Header.Revision
	now := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if name, ok := w.nameOf(kv.Key); ok {
			now[name] = kv
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.held)) {
		old := w.held[name]
		if cur := now[name]; cur == nil || cur.CreateRevision != old.CreateRevision {
			delete(w.held, name)
			if !w.ended(ctx, name, old, rev, true) {
				return ctx.Err()
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(now)) {
		cur := now[name]
		old := w.held[name]
		w.held[name] = cur
		if old != nil {
			continue
		}
		ev := Event{Type: EventTaken, Name: name, Holder: decodeInfo(name, cur), Revision: cur.CreateRevision, Initial: initial, Reread: !initial}
		if !w.emit(ctx, ev) {
			return ctx.Err()
		}
	}
	if initial && !w.prefix && len(now) == 0 && !w.emit(ctx, Event{Type: EventFree, Name: w.name, Revision: rev, Initial: true}) {
		return ctx.Err()
	}
	w.rev = rev + 1
	return nil
}

func (w *watcher) emit(ctx context.Context, ev Event) bool {
	select {
	case w.out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// nameOf returns the lock name of key, or false for a key that is no lock of
// this package (a deeper path under the prefix).
func (w *watcher) nameOf(key []byte) (string, bool) {
	n := strings.TrimPrefix(string(key), w.c.prefix)
	return n, checkName(n) == nil
}
