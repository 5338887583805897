package lockclient

import (
	"context"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
	gone    map[int64]bool              // lease lookups of the deletes at goneRev
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

func (w *watcher) opts(extra ...clientv3.OpOption) []clientv3.OpOption {
	if w.prefix {
		extra = append(extra, clientv3.WithPrefix())
	}
	return extra
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
	gone, ok := w.leaseGone(ctx, kv.Lease, rev)
	if !ok {
		return false
	}
	typ := EventReleased
	if gone {
		typ = EventExpired
	}
	return w.emit(ctx, Event{Type: typ, Name: name, Holder: decodeInfo(name, kv), Revision: rev, Reread: reread})
}

// leaseGone asks etcd whether lease no longer exists (a read; retried until
// it answers or ctx ends), once per lease among the deletes of one revision:
// the keys of one expired lease are deleted together.
func (w *watcher) leaseGone(ctx context.Context, lease, rev int64) (gone, ok bool) {
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
		resp, err := w.c.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
		if err == nil {
			w.gone[lease] = resp.TTL < 0
			return resp.TTL < 0, true
		}
		if w.c.sleep(ctx, retryDelay) != nil {
			return false, false
		}
	}
}

// read reads the current state and reports how it differs from what was last
// reported: the first events of the watch, or, after a compaction, the ends and
// grants that the lost history held.
func (w *watcher) read(ctx context.Context) error {
	resp, err := w.c.cli.Get(ctx, w.key, w.opts()...)
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
	for _, name := range sortedNames(w.held) {
		old := w.held[name]
		if cur := now[name]; cur == nil || cur.CreateRevision != old.CreateRevision {
			delete(w.held, name)
			if !w.ended(ctx, name, old, rev, true) {
				return ctx.Err()
			}
		}
	}
	for _, name := range sortedNames(now) {
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
	if initial && !w.prefix && len(now) == 0 {
		if !w.emit(ctx, Event{Type: EventFree, Name: w.name, Revision: rev, Initial: true}) {
			return ctx.Err()
		}
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

func sortedNames(m map[string]*mvccpb.KeyValue) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
