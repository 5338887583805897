package lockclient

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// EventType says what changed about a lock's holder.
type EventType int

// The changes Watch reports.
const (
	// EventTaken: the lock was granted; Holder is the new holder, with its
	// token and its WithValue value.
	EventTaken EventType = iota + 1
	// EventReleased: the key was deleted while its holder's session lease
	// lived: a Release (or a Lead's resign), or an operator's fencectl
	// release. Holder is the holder whose hold ended.
	EventReleased
	// EventExpired: the key was deleted with its holder's session lease: the
	// lease expired (the holder crashed, froze or was cut off) or the holder's
	// Client revoked it in Close; etcd reports both the same way. Holder is the
	// holder whose hold ended.
	EventExpired
	// EventFree: nobody holds the name. Only the first event of Watch (Initial)
	// when the lock is free.
	EventFree
)

func (t EventType) String() string {
	switch t {
	case EventTaken:
		return "taken"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	case EventFree:
		return "free"
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
	// Reread marks events found by reading the state again because etcd had
	// compacted away the history since the last event (a watcher cut off for
	// long): changes in between may be missing, and these events bring the
	// watcher to what holds now (the end of a hold it knew, and the new holder).
	Reread bool
}

// Watch reports every change of the holder of lock name, in etcd's order, on
// the returned channel, until ctx ends or the Client (or its etcd client) is
// closed; then the channel is closed. It starts with the current state (Initial: EventTaken, or
// EventFree), then reports each grant (EventTaken) and each end of a hold
// (EventReleased, EventExpired). Followers use it to find their leader: the
// holder of a Lead's lock is the leader, its Info.Value what the leader stored.
//
// It is one etcd watch for the call's life, and writes nothing. It survives
// members lost, leader changes and reconnects by resuming from the revision
// after its last event, so nothing is skipped or repeated; when etcd compacted
// that revision away, it reads the state again and reports the difference
// with Reread set. Telling EventReleased from EventExpired costs one lease
// lookup per deleted key (a read), made when the deletion is reported: a hold
// released explicitly just before its lease also ended (Close) may be reported
// as EventExpired. Events are delivered in order; a reader that stops reading
// holds the watch back, not etcd.
//
// It returns an error wrapping fence.ErrInvalidArgument for a bad name, and
// ErrClosed on a closed Client, before any I/O.
func (c *Client) Watch(ctx context.Context, name string) (<-chan Event, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return c.startWatch(ctx, name, false)
}

// WatchPrefix is Watch for every lock whose name starts with prefix ("" for
// every lock under the Client's key prefix), on one etcd watch. Its Initial
// events are the held locks only (no EventFree). It returns an error wrapping
// fence.ErrInvalidArgument for a prefix with a slash or a control character,
// and ErrClosed on a closed Client.
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
