package lockclient

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/fencegate/fencegate/fence"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxSetSize is the most names one AcquireSet takes. Its Txn has one compare and
// one put per name, and etcd refuses a Txn with more operations in one branch
// than its --max-txn-ops (default 128). A cluster run with a lower limit refuses
// larger sets with etcd's rpctypes.ErrTooManyOps.
const MaxSetSize = 128

// AcquireSet takes the locks on every one of names all-or-nothing, waiting while
// any of them is held, until the set is granted or ctx ends; ctx governs the wait
// and every etcd call. Each attempt is one etcd Txn that creates every key under
// the session lease only if none exists; the set's token is their shared create
// revision. While any name is held, AcquireSet watches the keys that blocked it
// until each was deleted, and writes nothing; then it tries again.
//
// The set is one *Lock: Resources returns its names, Resource the first in
// sorted order; its token is higher than every token granted before for any
// name. It ends as a whole (see Lock): the loss of any one key loses the set,
// and the Client then deletes its keys that still carry its token.
//
// It cannot deadlock, in whatever order callers list the names: a waiting
// AcquireSet holds none of its names, so no cycle of waiters each holding what
// the next one wants can form (provided the caller itself holds no other lock
// while it waits). It is not fair: a set may wait while single locks on its
// names come and go. A set of one name is the same lock as Acquire takes.
//
// Holder and List show the other names of a set (Info.Set). A Client's Release of
// any one name of a set it holds, with the set's token, releases the whole set.
// The Observer and the log see the set under its Resource (its first name).
//
// Before any I/O it returns an error wrapping fence.ErrInvalidArgument for no
// names, a name listed twice, more than MaxSetSize names, a bad name or a bad
// option. Other errors are those
// of Acquire.
func (c *Client) AcquireSet(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return c.acquireSetObserved(ctx, names, opts, true)
}

// TryAcquireSet takes the locks on every one of names if none of them is held,
// and otherwise returns at once a *HeldError (errors.Is(err, ErrHeld)) naming the
// first held name (in sorted order), its holder and token. It is one etcd Txn and
// writes nothing when any name is held. ctx governs the call. Other errors are
// those of AcquireSet; a transient etcd error is returned, not retried.
func (c *Client) TryAcquireSet(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return c.acquireSetObserved(ctx, names, opts, false)
}

func (c *Client) acquireSetObserved(ctx context.Context, names []string, opts []LockOption, wait bool) (*Lock, error) {
	var start time.Time
	if c.obs != nil || c.log != nil {
		start = time.Now()
	}
	l, err := c.acquireSet(ctx, names, opts, wait)
	if c.obs != nil || c.log != nil {
		first := ""
		if l != nil {
			first = l.name
		} else if len(names) > 0 {
			first = slices.Min(names)
		}
		c.acquired(ctx, first, start, l, err, wait)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// checkSet returns names sorted in a new slice, or why they cannot form a set.
func checkSet(names []string) ([]string, error) {
	switch {
	case len(names) == 0:
		return nil, invalid("lock set: no names")
	case len(names) > MaxSetSize:
		return nil, invalid("lock set: %d names, the limit is %d (etcd's default --max-txn-ops)", len(names), MaxSetSize)
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

func (c *Client) acquireSet(ctx context.Context, names []string, opts []LockOption, wait bool) (*Lock, error) {
	names, err := checkSet(names)
	if err != nil {
		return nil, err
	}
	lo, err := buildLockOptions(c.ttl, opts)
	if err != nil {
		return nil, err
	}
	txn := c.newSetTxn(names)
	keys := txn.keys
	var lease clientv3.LeaseID
	var unknown [][]byte // values of attempts whose outcome is unknown, as in acquire
	for {
		cur, err := c.session(ctx) // per attempt, as acquire: the session may change
		if err != nil {
			c.forgetSet(keys, unknown)
			return nil, err
		}
		if cur != lease {
			lease, unknown = cur, nil // an old lease takes its keys with it
		}
		sent := time.Now()
		val := c.encodeSet(sent, len(names))
		resp, err := txn.commit(ctx, c, lease, val)
		if err != nil {
			if transient(ctx, err) {
				unknown = append(unknown, val) // it may have taken the set
			}
			if retry, err := c.retrySet(ctx, err, wait, names); !retry {
				c.forgetSet(keys, append(unknown, val)) // ctx may have ended on a Txn that landed
				return nil, err
			}
			continue
		}
		if resp.Succeeded {
			got, err := c.registerLock(c.newSetLock(names, fence.Token(resp.Header.Revision), lease, lo), sent, lo)
			if wait && err != nil && errors.Is(err, ErrSessionLost) {
				continue // the keys went with the lease; session() decides what next
			}
			return got, err
		}
		if l, done, err := c.setBlocked(ctx, txn, names, resp, lease, unknown, lo, wait); done {
			return l, err
		}
	}
}

// setBlocked handles a set's acquire Txn that found some of its keys, as
// blocked does for one name: done with the set when an earlier attempt of this
// call had taken all of it, for TryAcquireSet (a *HeldError naming the first
// held name), or when the wait fails; otherwise the caller tries again.
func (c *Client) setBlocked(ctx context.Context, txn *setTxn, names []string, resp *clientv3.TxnResponse, lease clientv3.LeaseID, unknown [][]byte, lo lockOptions, wait bool) (l *Lock, done bool, err error) {
	held, ours := blockers(resp, lease, unknown)
	if len(ours) == len(names) {
		// An earlier attempt whose answer was lost took the whole set.
		info := decodeInfo(names[0], ours[0])
		l, err := c.registerLock(c.newSetLock(names, info.Token, lease, lo), info.AcquiredAt, lo)
		return l, true, err
	}
	if len(ours) > 0 {
		// Part of an earlier attempt's set is left (someone deleted the rest):
		// give it up, and wait for those keys like any other.
		c.forgetSet(txn.keys, unknown)
		held = append(held, ours...)
	}
	if len(held) == 0 {
		return nil, false, nil // cannot happen: the compare failed, so a key existed in this Txn
	}
	if !wait {
		info := decodeInfo(nameOf(c, held[0]), held[0])
		return nil, true, &HeldError{Name: info.Name, Holder: info, Token: info.Token}
	}
	if err := c.waitSet(ctx, held, resp.Header.Revision); err != nil {
		c.forgetSet(txn.keys, unknown)
		return nil, true, err
	}
	return nil, false, nil
}
