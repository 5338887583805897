package lockclient

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Info describes a lock's current holder, from the value stored with its key.
type Info struct {
	Name       string
	Token      fence.Token   // the holder's fencing token (the key's create revision)
	Host       string        // the holder's host name
	PID        int           // the holder's process ID
	ClientID   string        // the holder Client's ID (WithIdentity, or host-pid-random)
	AcquiredAt time.Time     // when the holder sent its acquire, by its own clock
	LeaseLeft  time.Duration // time left on the holder's session lease, as etcd counts it (whole seconds)
	// Set lists, sorted, the names held with this one under the same token when
	// the lock was taken by AcquireSet (this name included; names whose keys are
	// gone are not listed); nil for a lock taken alone.
	Set []string
	// Value is what the holder stored with the lock (Lead's WithValue, such as
	// the leader's address); nil when it stored none.
	Value []byte
	// Semaphore is, for a permit (AcquirePermit), the semaphore's name; Name is
	// then the permit's slot name ("jobs/0002"). "" for a lock.
	Semaphore string
	// Waiting lists, in line order, the callers waiting for the lock, each with
	// the token it will hold (Holder only; nil from List and Watch).
	Waiting []Info
}

// holderValue is what a lock key stores. Seq makes every acquire attempt's value
// unique, so an attempt whose answer was lost can recognise its own key.
type holderValue struct {
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	ClientID   string    `json:"client_id"`
	AcquiredAt time.Time `json:"acquired_at"`
	Seq        uint64    `json:"seq"`
	SetSize    int       `json:"set_size,omitempty"` // the names of its set (AcquireSet); 0 alone
	Value      []byte    `json:"value,omitempty"`    // WithValue's value (base64 in JSON)
}

// encode returns the value of one acquire attempt: holderValue's JSON, appended
// without reflection to the fields marshalled once in New (valuePrefix).
func (c *Client) encode(at time.Time, r *request) []byte {
	b := make([]byte, 0, len(c.valuePrefix)+64)
	b = append(b, c.valuePrefix...)
	b = append(b, `,"acquired_at":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, c.seq.Add(1), 10)
	if r.set {
		b = append(b, `,"set_size":`...)
		b = strconv.AppendInt(b, int64(len(r.names)), 10)
	}
	if r.lo.value != nil {
		b = append(b, `,"value":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.lo.value)
		b = append(b, '"')
	}
	return append(b, '}')
}

// valuePrefix is holderValue's fixed fields as JSON without the closing brace;
// the random instance makes it this Client's own even when clients share an ID.
func valuePrefix(host string, pid int, id, instance string) []byte {
	b, _ := json.Marshal(struct {
		Host     string `json:"host"`
		PID      int    `json:"pid"`
		ClientID string `json:"client_id"`
		Instance string `json:"instance"`
	}{host, pid, id, instance})
	return b[:len(b)-1]
}

// decodeInfo reads a lock key. A value this package did not write leaves the
// holder fields empty rather than failing: the token is what matters.
func decodeInfo(name string, kv *mvccpb.KeyValue) Info {
	var v holderValue
	_ = json.Unmarshal(kv.Value, &v)
	return Info{
		Name:       name,
		Token:      fence.Token(kv.CreateRevision),
		Host:       v.Host,
		PID:        v.PID,
		ClientID:   v.ClientID,
		AcquiredAt: v.AcquiredAt,
		Value:      v.Value,
		Semaphore:  semaphoreOf(name),
	}
}

// Holder returns who holds the lock name, with its token, the time left on its
// session lease (a second etcd call; a manual-renewal lock may end sooner) and,
// for a set, the set's names (a third). ctx governs every call.
//
// Errors: a *NotHeldError (Current 0) when nobody holds it;
// fence.ErrInvalidArgument for a bad name; ErrClosed; etcd's error.
func (c *Client) Holder(ctx context.Context, name string) (_ Info, err error) {
	if err := checkLockName(name); err != nil {
		return Info{}, err
	}
	if err := c.usable(); err != nil {
		return Info{}, err
	}
	ctx, end := c.call(ctx) // Close ends the call
	defer end(&err)
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	key := c.key(name)
	resp, err := c.cli.Get(ctx, key, clientv3.WithRange(lineEnd(key)), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return Info{}, fmt.Errorf("lockclient: holder of %q: %w", name, c.explain(ctx, err))
	}
	if len(resp.Kvs) == 0 {
		return Info{}, &NotHeldError{Name: name}
	}
	if slices.ContainsFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return isMark(kv.Value) }) {
		return Info{}, semaphoreErr("Holder", name)
	}
	held := resp.Kvs[0]
	info := decodeInfo(name, held)
	for _, kv := range resp.Kvs[1:] {
		info.Waiting = append(info.Waiting, decodeInfo(name, kv))
	}
	if inSet(held) {
		info.Set, err = c.setNames(ctx, info.Token)
	}
	if err == nil {
		info.LeaseLeft, err = c.leaseLeft(ctx, clientv3.LeaseID(held.Lease), nil)
	}
	if err != nil {
		return Info{}, fmt.Errorf("lockclient: holder of %q: %w", name, c.explain(ctx, err))
	}
	return info, nil
}

// List returns every held lock and permit under the Client's prefix, by name,
// with one etcd read for the keys and one lease lookup per distinct holder
// session; the names of a set carry the set's names in Info.Set, a permit its
// semaphore's in Info.Semaphore. ctx governs all of them.
//
// Errors: ErrClosed; etcd's error.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	infos, err := c.list(ctx, c.prefix)
	if err != nil {
		return nil, fmt.Errorf("lockclient: list: %w", err)
	}
	return infos, nil
}

// list is List of the keys under from.
func (c *Client) list(ctx context.Context, from string) (_ []Info, err error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	ctx, end := c.call(ctx) // Close ends the call
	defer end(&err)
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	resp, err := c.cli.Get(ctx, from, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, c.explain(ctx, err)
	}
	cache := make(map[clientv3.LeaseID]time.Duration)
	infos := make([]Info, 0, len(resp.Kvs))
	sets := make(map[fence.Token][]string) // a set's names: its keys share a create revision
	for _, kv := range lineHeads(resp.Kvs, c.nameOf) {
		name := c.nameOf(kv)
		if checkLockName(name) != nil || isMark(kv.Value) {
			continue // not a held lock's key (a deeper path, a semaphore's mark)
		}
		info := decodeInfo(name, kv)
		if inSet(kv) {
			sets[info.Token] = append(sets[info.Token], name)
			info.Set = sets[info.Token][:0] // filled in below, once the set is complete
		}
		if info.LeaseLeft, err = c.leaseLeft(ctx, clientv3.LeaseID(kv.Lease), cache); err != nil {
			return nil, c.explain(ctx, err)
		}
		infos = append(infos, info)
	}
	for i := range infos {
		if infos[i].Set != nil {
			infos[i].Set = slices.Clone(sets[infos[i].Token])
		}
	}
	return infos, nil
}

// lineHeads returns, of keys sorted by key, the head of each name's line (the
// lowest create revision among its lock key and its places): its holder; a
// line with a semaphore's mark gives the mark.
func lineHeads(kvs []*mvccpb.KeyValue, nameOf func(*mvccpb.KeyValue) string) []*mvccpb.KeyValue {
	var heads []*mvccpb.KeyValue
	last := ""
	for _, kv := range kvs {
		name := nameOf(kv)
		switch h := len(heads) - 1; {
		case h < 0 || name != last:
			heads = append(heads, kv)
		case isMark(kv.Value) || (!isMark(heads[h].Value) && kv.CreateRevision < heads[h].CreateRevision):
			heads[h] = kv
		}
		last = name
	}
	return heads
}

// setNames returns the names of the set whose token is tok: the keys under the
// prefix created at revision tok, which only one Txn can have created.
func (c *Client) setNames(ctx context.Context, tok fence.Token) ([]string, error) {
	resp, err := c.cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMinCreateRev(int64(tok)), clientv3.WithMaxCreateRev(int64(tok)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if n := c.nameOf(kv); checkName(n) == nil {
			names = append(names, n)
		}
	}
	return names, nil
}

// inSet reports whether kv's value says it was created by AcquireSet.
func inSet(kv *mvccpb.KeyValue) bool {
	var v struct {
		SetSize int `json:"set_size"`
	}
	_ = json.Unmarshal(kv.Value, &v)
	return v.SetSize > 0
}

func (c *Client) leaseLeft(ctx context.Context, id clientv3.LeaseID, cache map[clientv3.LeaseID]time.Duration) (time.Duration, error) {
	if id == clientv3.NoLease {
		return 0, nil
	}
	if d, ok := cache[id]; ok {
		return d, nil
	}
	resp, err := c.cli.TimeToLive(ctx, id)
	if err != nil {
		return 0, err
	}
	d := max(time.Duration(resp.TTL)*time.Second, 0) // -1: expired meanwhile
	if cache != nil {
		cache[id] = d
	}
	return d, nil
}

func (c *Client) usable() error {
	if c.sess.isClosed() {
		return ErrClosed
	}
	return nil
}

// NextToken returns the lowest token a lock granted after this call can carry:
// etcd's revision + 1, from one linearizable read under ctx. Every token
// granted before the call is lower, by any Client, for any name. It is the
// operator's fence: stored as a resource's high-water token (package
// adapters/fencemark), it makes the database refuse the fenced writes of every
// holder granted before the call.
//
// Errors: ErrClosed; etcd's error.
func (c *Client) NextToken(ctx context.Context) (_ fence.Token, err error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	ctx, end := c.call(ctx) // Close ends the call
	defer end(&err)
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("lockclient: read etcd's revision: %w", c.explain(ctx, err))
	}
	return fence.Token(resp.Header.Revision + 1), nil
}
