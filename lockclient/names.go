package lockclient

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// namesKind is the kind of Acquire and AcquireSet: every key of the call's
// names created under the session lease in one Txn when no one holds or waits
// for them. A waiting Acquire of one name that finds it taken writes its place
// in the name's line instead, in the same Txn, and is granted in turn.
type namesKind struct {
	keys  []string
	line  bool   // a waiting Acquire of one name: it queues
	place string // the last attempt's place in the line, when it wrote one
	val   []byte // and the value it wrote
	alone bool   // the last attempt put only its place (a large value)
	queue bool   // the next attempt puts only its place
	resp  *clientv3.TxnResponse
}

// maxInline is the largest value an attempt carries twice (the lock key's put
// and the place's, in the two branches of one Txn); a larger one first tries
// the key alone, then, refused, queues with a Txn of its own, so a request
// stays under etcd's limit (1.5 MiB by default) up to WithValue's 1 MiB.
const maxInline = 256 << 10

func (k *namesKind) try(ctx context.Context, a *attempt, val []byte) (*granted, []string, error) {
	k.place, k.val, k.alone = "", val, false
	if k.line && (len(val) <= maxInline || k.queue) {
		k.place = a.c.placeKey(k.keys[0], a.lease)
	}
	var resp *clientv3.TxnResponse
	var err error
	if k.alone = k.place != "" && len(val) > maxInline; k.alone {
		resp, err = a.c.txnQueue(ctx, k.keys[0], a.lease, val, k.place)
	} else {
		resp, err = a.c.txnCreate(ctx, k.keys, a.lease, val, k.place, len(a.unknown) > 0)
	}
	switch {
	case err != nil && k.place != "":
		return nil, []string{k.keys[0], k.place}, err
	case err != nil:
		return nil, k.keys, err
	case resp.Succeeded && !k.alone:
		return &granted{names: a.r.names, keys: k.keys, token: fence.Token(resp.Header.Revision)}, nil, nil
	}
	k.resp = resp
	return nil, nil, nil
}

// txnQueue puts place in key's line, unless the name is a semaphore's, and
// reads the line. On an empty line the place holds the lock at once.
func (c *Client) txnQueue(ctx context.Context, key string, lease clientv3.LeaseID, val []byte, place string) (*clientv3.TxnResponse, error) {
	get := clientv3.OpGet(key, clientv3.WithRange(lineEnd(key)))
	queue := []clientv3.Op{clientv3.OpPut(place, string(val), clientv3.WithLease(lease))}
	mark := c.sess.marks(lease)
	if mark {
		queue = append(queue, clientv3.OpPut(sessionKey(c.prefix, int64(lease)), "", clientv3.WithLease(lease)))
	}
	resp, err := retryOverload(ctx, c, "acquire", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", semaphoreMark)).
			Then(get).Else(append(queue, get)...).Commit()
	})
	if mark && err == nil && !resp.Succeeded {
		c.sess.markStored(lease)
	}
	return resp, err
}

// txnCreate sends one attempt: every key put with val under lease if its line
// is empty, else, with a place, the place put (unless the name is a
// semaphore's), and the lines read. The session's first key also stores its
// session key (sessionKey), by which Watch tells a release from an expiry.
func (c *Client) txnCreate(ctx context.Context, keys []string, lease clientv3.LeaseID, val []byte, place string, whole bool) (*clientv3.TxnResponse, error) {
	cmps := make([]clientv3.Cmp, len(keys))
	puts := make([]clientv3.Op, len(keys), len(keys)+1)
	gets := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(k), "=", 0).WithRange(lineEnd(k))
		puts[i] = clientv3.OpPut(k, string(val), clientv3.WithLease(lease))
		gets[i] = clientv3.OpGet(k, clientv3.WithRange(lineEnd(k)))
	}
	mark := c.sess.marks(lease) && len(keys) < maxSetSize // a Txn takes at most 128 operations
	var session []clientv3.Op
	if mark {
		session = []clientv3.Op{clientv3.OpPut(sessionKey(c.prefix, int64(lease)), "", clientv3.WithLease(lease))}
	}
	els := gets
	if place != "" {
		queue := append([]clientv3.Op{clientv3.OpPut(place, string(val), clientv3.WithLease(lease))}, session...)
		isSem := clientv3.Compare(clientv3.Value(keys[0]), "=", semaphoreMark)
		els = []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{isSem}, gets, append(queue, lineTail(keys[0], whole)))}
	}
	resp, err := retryOverload(ctx, c, "acquire", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(cmps...).Then(append(puts, session...)...).Else(els...).Commit()
	})
	if mark && err == nil && (resp.Succeeded || place != "") {
		c.sess.markStored(lease) // with the keys, or with the place (unless a semaphore's: harmless)
	}
	return resp, err
}

// lines returns each name's line as the refused attempt read it, and whether
// the attempt wrote its place.
func (k *namesKind) lines() ([][]*mvccpb.KeyValue, bool) {
	rs := k.resp.Responses
	if k.place == "" {
		out := make([][]*mvccpb.KeyValue, len(rs))
		for i, r := range rs {
			out[i] = r.GetResponseRange().GetKvs()
		}
		return out, false
	}
	sem := k.resp.Succeeded // txnQueue's compare: the name is a semaphore's
	if !k.alone {
		nested := rs[0].GetResponseTxn()
		rs, sem = nested.Responses, nested.Succeeded
	}
	last := rs[len(rs)-1]
	return [][]*mvccpb.KeyValue{last.GetResponseRange().GetKvs()}, !sem
}

// blocked handles an attempt that found the names taken: in line, it waits
// for its turn; otherwise it is done when an earlier attempt of this call had
// taken every key, for a try (a *HeldError), or when the wait fails, and else
// the keys that blocked it were deleted and the caller tries again.
func (k *namesKind) blocked(ctx context.Context, a *attempt) (*granted, bool, error) {
	c := a.c
	lines, queued := k.lines()
	for _, line := range lines {
		for _, kv := range line {
			if isMark(kv.Value) { // checked by the Txn: the key etcd compared
				return nil, true, semaphoreErr("Acquire", c.nameOf(kv))
			}
		}
	}
	if k.line && k.place == "" {
		k.queue = true // a large value's refused try: queue at once
		return nil, false, nil
	}
	if queued {
		me := &mvccpb.KeyValue{Key: []byte(k.place), Value: k.val, CreateRevision: k.resp.Header.Revision, Lease: int64(a.lease)}
		a.unknown = append(a.unknown, tried{k.place, string(k.val)}) // deleted if the call gives up
		return k.waitTurn(ctx, a, k.pickPlace(ctx, a, lines[0], me), lines[0], k.resp.Header.Revision)
	}
	heads := make([]*mvccpb.KeyValue, 0, len(lines))
	for _, line := range lines {
		if len(line) > 0 {
			heads = append(heads, head(line))
		}
	}
	return k.waitHeads(ctx, a, heads)
}

// waitHeads handles a try's or a set's refusal by the keys holding its names:
// an earlier attempt's grant, a *HeldError for a try, else a wait until each
// is deleted (a set keeps no place in line: see docs/design.md).
func (k *namesKind) waitHeads(ctx context.Context, a *attempt, heads []*mvccpb.KeyValue) (*granted, bool, error) {
	c, r := a.c, a.r
	var held, ours, orphans []*mvccpb.KeyValue
	for _, kv := range heads {
		switch {
		case a.orphan(kv):
			orphans = append(orphans, kv)
		case a.ours(kv):
			ours = append(ours, kv)
		default:
			held = append(held, kv)
		}
	}
	if len(orphans) > 0 {
		if err := c.dropOrphans(ctx, orphans); err == nil {
			return nil, false, nil
		}
		held = append(held, orphans...) // not deleted: waited out like any other
	}
	if len(ours) == len(r.names) {
		return a.found(r.names, k.keys, ours[0]), false, nil // an earlier attempt took every key
	}
	if len(ours) > 0 {
		// Part of an earlier attempt's keys is left (someone deleted the rest):
		// give it up, and wait for those keys like any other.
		c.forget(a.unknown)
		a.unknown = nil
		held = append(held, ours...)
	}
	if len(held) == 0 {
		return nil, false, nil // every line emptied meanwhile: try again
	}
	if !r.wait {
		info := decodeInfo(c.nameOf(held[0]), held[0])
		return nil, true, &HeldError{Name: info.Name, Holder: info, Token: info.Token}
	}
	c.waiting(ctx, c.nameOf(held[0]), held[0])
	for _, kv := range held {
		if err := c.waitDeleted(ctx, string(kv.Key), k.resp.Header.Revision); err != nil {
			return nil, true, err
		}
	}
	return nil, false, nil
}

// nameOf returns the lock name of a key in a line: its lock key's, for a place too.
func (c *Client) nameOf(kv *mvccpb.KeyValue) string {
	name, _, _ := strings.Cut(string(kv.Key[len(c.prefix):]), "\x00")
	return name
}

// sessionKey is the key a session stores under its lease with its first
// grant. etcd deletes a lease's keys at one revision, so a lock key deleted at
// a revision where its session's key still exists was released, not expired.
// The NUL byte keeps it out of every lock name.
func sessionKey(prefix string, lease int64) string {
	return prefix + "\x00session/" + strconv.FormatInt(lease, 16)
}

// checkName reports why name cannot name a lock (lockname.Check), or nil; the
// error wraps fence.ErrInvalidArgument.
func checkName(name string) error {
	if err := lockname.Check(name); err != nil {
		return fmt.Errorf("lockclient: %w", err)
	}
	return nil
}

// checkSet returns names sorted in a new slice, or why they cannot form a set.
func checkSet(names []string) ([]string, error) {
	switch {
	case len(names) == 0:
		return nil, invalid("lock set: no names")
	case len(names) > maxSetSize:
		return nil, invalid("lock set: %d names, the limit is %d (etcd's default --max-txn-ops)", len(names), maxSetSize)
	}
	for _, n := range names {
		if err := checkName(n); err != nil {
			return nil, err
		}
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, invalid("lock set: %q listed more than once", sorted[i])
		}
	}
	return sorted, nil
}

// label names a lock in errors: its name, or for a set its first names and size.
func label(names []string, set bool) string {
	switch {
	case !set:
		return fmt.Sprintf("%q", names[0])
	case len(names) <= 3:
		return fmt.Sprintf("set %q", names)
	}
	return fmt.Sprintf("set %q... of %d names", names[:3], len(names))
}

// semaphoreMark is the value of a semaphore's own key (its name's lock key),
// put without a lease by its first AcquirePermit in the same Txn as the permit.
// It makes the name a semaphore for good: Acquire finds the key and, reading
// this value, refuses the name, and AcquirePermit refuses a name whose key
// holds a lock, both decided by the Txn's compare in etcd. Delete it (fencectl
// release) only when no permit is held, to use the name as a lock again.
const semaphoreMark = `{"semaphore":true}`

// slotName is the name of slot i of the semaphore name: "name/0007".
func slotName(name string, i int) string { return lockname.Slot(name, i) }

// slotIndex returns the index of slot, when slot is a slot name of sem.
func slotIndex(slot, sem string) (int, bool) {
	s, i, ok := lockname.ParseSlot(slot)
	return i, ok && s == sem
}

// semaphoreOf returns the semaphore of a slot name, or "" for any other name.
func semaphoreOf(name string) string {
	s, _, _ := lockname.ParseSlot(name)
	return s
}

// checkLockName accepts a lock's name or a permit's slot name (what Release,
// Holder and Watch take), else says why not (checkName's error).
func checkLockName(name string) error {
	if semaphoreOf(name) != "" {
		return nil
	}
	return checkName(name)
}

// isMark reports whether a lock key's value is a semaphore's mark.
func isMark(val []byte) bool { return string(val) == semaphoreMark }

// semaphoreErr is the error of Acquire (or Holder) on a semaphore's name.
func semaphoreErr(op, name string) error {
	return invalid("%s(%q): %q is a semaphore (AcquirePermit; List shows its permits), not a lock", op, name, name)
}

// maxSetSize is the most names one AcquireSet takes: etcd's default
// --max-txn-ops (a lower limit refuses with rpctypes.ErrTooManyOps).
const maxSetSize = 128
