package redisfence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fence"
)

var _ fence.Store[redis.Pipeliner] = (*Store)(nil)

// errExecInFn is what a fenced transaction's pipeline says when fn tries to send it.
var errExecInFn = errors.New("redisfence: a fenced transaction's commands are sent when fn returns; do not call Exec, Pipelined or TxPipelined on it")

// Fenced runs fn, which queues commands on tx as on a go-redis pipeline, then
// sends them with the fence in one script, applied atomically (one round trip;
// two when one of them has keys that move with its arguments): if any of g's
// resources has a higher token than g's, nothing is applied and Fenced returns a
// *fence.StaleError naming it; else every mark is raised to g's token and the
// commands run in order, their replies filling fn's commands. As in EXEC, a
// command failing at run time (WRONGTYPE) undoes neither the others nor the
// raise: Fenced returns the first such error, wrapped. Nothing is sent when fn
// returns an error (returned as is) or a Watched lock is lost (fence.ErrLost).
// Commands are checked by the server's command table (see Commands in the package
// doc): a refused one is fence.ErrInvalidArgument naming it, nothing written, as
// are a bad grant, a nil fn and a reply type the Store cannot fill.
// ErrCommandTable when the table cannot be read; a lost reply is
// fence.ErrCommitUnknown, never sent again.
func (s *Store) Fenced(ctx context.Context, g fence.Grant, fn func(tx redis.Pipeliner) error) (err error) {
	defer s.observe("fenced", &err)
	if err := s.usable(); err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil function")
	}
	if err := fence.CheckGrant(g); err != nil {
		return err
	}
	resources := fence.Resources(g)
	marks := make([]string, len(resources))
	for i, r := range resources {
		marks[i] = MarkKey(r)
		if s.cluster && Slot(marks[i]) != Slot(marks[0]) {
			return invalid("resources %q and %q are in cluster slots %d and %d: on a Redis Cluster a fenced transaction's resources must share one slot (give them a common hash tag)", resources[0], r, Slot(marks[0]), Slot(marks[i]))
		}
	}
	p := &txPipe{Pipeliner: s.rdb.Pipeline()}
	defer p.Pipeliner.Discard()
	if err := fn(p); err != nil {
		return err
	}
	if p.sent {
		return errExecInFn
	}
	cmds := p.Pipeliner.Cmds()
	keys, args, err := s.txArgs(ctx, g, resources, marks, cmds)
	if err != nil {
		return err
	}
	if err := fence.CheckLost(g); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	reply, w, err := s.run(ctx, s.tx, keys, args, txAccepted)
	if err != nil {
		err = s.failed(g, "fenced transaction", err)
		fail(cmds, err)
		return err
	}
	return s.txResult(g, resources, cmds, reply, w)
}

// txArgs checks fn's commands and lays out the script's keys (marks, then data
// keys, each once) and arguments.
func (s *Store) txArgs(ctx context.Context, g fence.Grant, resources, marks []string, cmds []redis.Cmder) ([]string, []any, error) {
	keys := slices.Clone(marks)
	args := []any{strconv.FormatInt(int64(g.Token()), 10), len(marks), len(cmds)}
	if len(cmds) == 0 {
		return keys, args, nil
	}
	cmdKeys, err := s.cmdKeys(ctx, resources[0], marks[0], cmds)
	if err != nil {
		return nil, nil, err
	}
	for i, c := range cmds {
		for _, k := range cmdKeys[i] {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		a := c.Args()
		args = append(args, len(a))
		args = append(args, a...)
	}
	return keys, args, nil
}

// txResult reads the script's reply: a refusal, or every command's reply.
func (s *Store) txResult(g fence.Grant, resources []string, cmds []redis.Cmder, reply any, w waited) error {
	r, ok := reply.([]any)
	if !ok || len(r) < 2 {
		return fmt.Errorf("redisfence: fenced transaction: unexpected reply %v", reply)
	}
	if r[0] == int64(0) && len(r) == 3 {
		i, _ := r[1].(int64)
		seen, err := parseToken(r[2])
		if err != nil {
			return err
		}
		if i < 1 || int(i) > len(resources) {
			return fmt.Errorf("redisfence: fenced transaction: unexpected reply %v", reply)
		}
		err = stale(resources[i-1], g.Token(), seen)
		fail(cmds, err)
		return err
	}
	replies, _ := r[1].([]any)
	if len(replies) != len(cmds) {
		return fmt.Errorf("redisfence: fenced transaction: %d replies for %d commands", len(replies), len(cmds))
	}
	var first error
	for i, c := range cmds {
		fill(c, replies[i])
		if err := c.Err(); err != nil && err != redis.Nil && first == nil {
			first = fmt.Errorf("redisfence: fenced transaction for %q at token %d: command %d (%s): %w", g.Resource(), g.Token(), i+1, c.Name(), err)
		}
	}
	if first != nil {
		return first
	}
	return w.check(s)
}

// txAccepted reports whether the transaction script's reply says it ran: {1, replies}.
func txAccepted(reply any) bool {
	r, ok := reply.([]any)
	return ok && len(r) > 0 && r[0] == int64(1)
}

func fail(cmds []redis.Cmder, err error) {
	for _, c := range cmds {
		c.SetErr(err)
	}
}

// txPipe is the pipeline fn queues on: a go-redis pipeline that fn cannot send
// itself.
type txPipe struct {
	redis.Pipeliner
	sent bool
}

func (p *txPipe) Exec(context.Context) ([]redis.Cmder, error) {
	p.sent = true
	return nil, errExecInFn
}

func (p *txPipe) Pipelined(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	p.sent = true
	return nil, errExecInFn
}

func (p *txPipe) TxPipelined(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	p.sent = true
	return nil, errExecInFn
}

func (p *txPipe) Pipeline() redis.Pipeliner   { return p }
func (p *txPipe) TxPipeline() redis.Pipeliner { return p }
