package lockclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch reports every change of the holder of lock (or slot) name, in order, on
// the returned channel until ctx ends or the Client closes: first the state
// (Initial: EventTaken or EventFree), then each grant and each end of a hold.
// It resumes without a gap or a repeat; after a compaction it rereads the
// state (Reread). Telling EventReleased from EventExpired costs a read per
// deleted key, two for an expiry. A reader that stops reading holds the watch back, not etcd.
//
// Errors, before any I/O: fence.ErrInvalidArgument for a bad name; ErrClosed.
func (c *Client) Watch(ctx context.Context, name string) (<-chan Event, error) {
	if err := checkLockName(name); err != nil {
		return nil, err
	}
	return c.startWatch(ctx, name, false)
}

// WatchPrefix is Watch for every lock and permit whose name starts with prefix
// ("": every one; "jobs/": the permits of semaphore jobs), on one etcd watch;
// its Initial events are the held ones only.
func (c *Client) WatchPrefix(ctx context.Context, prefix string) (<-chan Event, error) {
	if prefix != "" {
		if err := checkName(strings.TrimSuffix(prefix, "/")); err != nil {
			return nil, err
		}
	}
	return c.startWatch(ctx, prefix, true)
}

func (c *Client) startWatch(ctx context.Context, name string, prefix bool) (<-chan Event, error) {
	ctx, end := c.call(ctx) // Close ends the watch
	w := &watcher{c: c, name: name, key: c.key(name), prefix: prefix, out: make(chan Event, 16), held: map[string]*mvccpb.KeyValue{}}
	run := func() {
		defer end(nil)
		defer close(w.out)
		w.run(ctx)
	}
	if !c.spawn(run) {
		end(nil)
		return nil, ErrClosed
	}
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
	if !ok || isMark(ev.Kv.Value) || (ev.PrevKv != nil && isMark(ev.PrevKv.Value)) {
		return true // not a lock's key, or a semaphore's mark: no holder
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
		if name, ok := w.nameOf(kv.Key); ok && !isMark(kv.Value) {
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
	return n, checkLockName(n) == nil
}

// EventType says what changed about a lock's holder.
type EventType int

// The changes Watch reports.
const (
	// EventTaken: the lock was granted; Holder is the new holder, with its
	// token and its WithValue value.
	EventTaken EventType = iota + 1
	// EventReleased: the key was deleted while its holder's session lease
	// lived (Release, Close, a Lead's resign, fencectl release), whatever
	// became of the lease afterwards. Holder is the holder whose hold ended.
	EventReleased
	// EventExpired: the key was deleted with its holder's session lease: the
	// holder went silent past its TTL (crashed, frozen, cut off), or its lease
	// was revoked with the key still on it. Holder is the holder whose hold
	// ended.
	EventExpired
	// EventFree: nobody holds the name. Only the first event of Watch (Initial)
	// when the lock is free.
	EventFree
)

func (t EventType) String() string {
	if t >= EventTaken && t <= EventFree {
		return [...]string{"taken", "released", "expired", "free"}[t-EventTaken]
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change of a lock's holder, reported by Watch and WatchPrefix.
type Event struct {
	Type     EventType
	Name     string
	Holder   Info  // LeaseLeft is zero: a watch reads no lease times
	Revision int64 // the etcd revision of the change, or of the read that found it
	// Initial marks the events of the watch's first read: the holders at the
	// start (or EventFree), not changes.
	Initial bool
	// Reread marks events of a reread after etcd compacted away the history
	// since the last event: changes in between may be missing; these bring the
	// watcher to what holds now.
	Reread bool
}
