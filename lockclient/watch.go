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
	w := &watcher{c: c, name: name, key: c.key(name), prefix: prefix, out: make(chan Event, 16),
		lines: map[string]map[string]*mvccpb.KeyValue{}, held: map[string]*mvccpb.KeyValue{}, touched: map[string]int64{}}
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

// watcher is the state of one Watch: every line's keys, the holders it last
// reported, by name, and the revision to resume from. It runs on its own
// goroutine.
type watcher struct {
	c       *Client
	name    string // the name, or the name prefix
	key     string // the key, or the key prefix
	prefix  bool
	out     chan Event
	lines   map[string]map[string]*mvccpb.KeyValue // each name's line: its keys by key
	held    map[string]*mvccpb.KeyValue            // the head of each name's line, as last reported
	touched map[string]int64                       // names whose lines changed, at which revision
	at      int64                                  // the revision of the changes in touched
	rev     int64                                  // the revision after the last read; 0 before the first
	gone    map[int64]bool                         // expired, by lease, among the deletes at goneRev
	goneRev int64
}

func (w *watcher) run(ctx context.Context) {
	w.c.wait(ctx, watchSpec{
		key: w.key, prefix: w.prefix, end: w.lineEnd(), prevKV: true,
		event: func(ev *clientv3.Event) bool {
			// The changes of one revision (one Txn, one lease's expiry) are
			// reported together, and a hold that begins and ends within one
			// watch response is still reported.
			if len(w.touched) > 0 && ev.Kv.ModRevision != w.at && !w.settleTouched(ctx) {
				return true
			}
			w.at = ev.Kv.ModRevision
			w.apply(ev)
			return false
		},
		flush: func() bool { return !w.settleTouched(ctx) },
		reread: func(ctx context.Context) (int64, bool, error) {
			err := w.read(ctx)
			return w.rev, ctx.Err() != nil, err
		},
	})
}

// lineEnd is the end of a one-name watch's range: the name's line.
func (w *watcher) lineEnd() string {
	if w.prefix {
		return ""
	}
	return lineEnd(w.key)
}

// apply records one etcd event in its name's line; the response's flush
// reports what changed.
func (w *watcher) apply(ev *clientv3.Event) {
	name, ok := w.nameOf(ev.Kv.Key)
	if !ok || isMark(ev.Kv.Value) || (ev.PrevKv != nil && isMark(ev.PrevKv.Value)) {
		return // not a lock's key, or a semaphore's mark: no holder
	}
	line := w.lines[name]
	if line == nil {
		line = map[string]*mvccpb.KeyValue{}
		w.lines[name] = line
	}
	if ev.Type == mvccpb.PUT {
		line[string(ev.Kv.Key)] = ev.Kv
	} else {
		delete(line, string(ev.Kv.Key))
	}
	w.touched[name] = ev.Kv.ModRevision
}

// settleTouched reports the holder changes of the lines touched since the
// last flush; false when ctx ended first.
func (w *watcher) settleTouched(ctx context.Context) bool {
	for _, name := range slices.Sorted(maps.Keys(w.touched)) {
		rev := w.touched[name]
		delete(w.touched, name)
		if !w.settle(ctx, name, rev, false, false) {
			return false
		}
	}
	return true
}

// settle compares name's line head with the holder last reported and reports
// the end of that hold and the new grant, at rev.
func (w *watcher) settle(ctx context.Context, name string, rev int64, initial, reread bool) bool {
	old, cur := w.held[name], w.headOf(name)
	switch {
	case old != nil && cur != nil && old.CreateRevision == cur.CreateRevision:
		w.held[name] = cur // the same hold's key written again
		return true
	case old != nil:
		delete(w.held, name)
		if !w.ended(ctx, name, old, rev, reread) {
			return false
		}
	}
	if cur == nil {
		delete(w.lines, name)
		return true
	}
	w.held[name] = cur
	if !initial && !reread {
		rev = max(rev, cur.ModRevision)
	} else {
		rev = cur.CreateRevision
	}
	return w.emit(ctx, Event{Type: EventTaken, Name: name, Holder: decodeInfo(name, cur), Revision: rev, Initial: initial, Reread: reread})
}

// headOf returns the key holding name's line, or nil.
func (w *watcher) headOf(name string) *mvccpb.KeyValue {
	var h *mvccpb.KeyValue
	for _, kv := range w.lines[name] {
		if h == nil || kv.CreateRevision < h.CreateRevision {
			h = kv
		}
	}
	return h
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
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if !w.prefix {
		opts = []clientv3.OpOption{clientv3.WithRange(lineEnd(w.key))}
	}
	resp, err := w.c.cli.Get(ctx, w.key, opts...)
	if err != nil {
		return err
	}
	initial, rev := w.rev == 0, resp.Header.Revision
	names := maps.Clone(w.held)
	clear(w.lines)
	for _, kv := range resp.Kvs {
		name, ok := w.nameOf(kv.Key)
		if !ok || isMark(kv.Value) {
			continue
		}
		if w.lines[name] == nil {
			w.lines[name] = map[string]*mvccpb.KeyValue{}
		}
		w.lines[name][string(kv.Key)] = kv
		names[name] = kv
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if !w.settle(ctx, name, rev, initial, !initial) {
			return ctx.Err()
		}
	}
	if initial && !w.prefix && len(w.held) == 0 && !w.emit(ctx, Event{Type: EventFree, Name: w.name, Revision: rev, Initial: true}) {
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

// nameOf returns the lock name of key (a lock key or a place in its line), or
// false for a key that is no lock of this package (a deeper path under the
// prefix, a semaphore's waiter).
func (w *watcher) nameOf(key []byte) (string, bool) {
	n := w.c.nameOf(&mvccpb.KeyValue{Key: key})
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
