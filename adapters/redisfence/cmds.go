package redisfence

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// checkCmd refuses a command whose reply the Store cannot fill from a script's.
func checkCmd(c redis.Cmder) error {
	if len(c.Args()) == 0 {
		return invalid("empty command")
	}
	switch c.(type) {
	case *redis.Cmd, *redis.StatusCmd, *redis.IntCmd, *redis.StringCmd, *redis.BoolCmd,
		*redis.FloatCmd, *redis.SliceCmd, *redis.StringSliceCmd, *redis.IntSliceCmd,
		*redis.BoolSliceCmd, *redis.MapStringStringCmd:
		return nil
	}
	return invalid("the Store cannot fill a %T from a script's reply; queue the command with tx.Do", c)
}

// cmdKeys checks fn's commands by the server's command table and returns each
// one's keys, every key checked by checkKey: from the table's key positions, and
// for commands whose keys move with their arguments from COMMAND GETKEYS, asked
// for all of them in one round trip, only when fn queued one. Every refusal that
// needs no GETKEYS comes before it.
func (s *Store) cmdKeys(ctx context.Context, resource, mark string, cmds []redis.Cmder) ([][]string, error) {
	t, err := s.table(ctx)
	if err != nil {
		return nil, err
	}
	keys := make([][]string, len(cmds))
	specs := make([]*cmdSpec, len(cmds))
	var movable []int
	for i, c := range cmds {
		if err := checkCmd(c); err != nil {
			return nil, cmdErr(i, c, err)
		}
		if specs[i], err = t.lookup(c.Name(), c.Args()); err != nil {
			return nil, cmdErr(i, c, err)
		}
		if specs[i].movable {
			movable = append(movable, i)
			continue
		}
		if keys[i], err = specs[i].keys(c.Args()); err != nil {
			return nil, cmdErr(i, c, err)
		}
		if err := s.checkKeys(resource, mark, keys[i]); err != nil {
			return nil, cmdErr(i, c, err)
		}
	}
	if len(movable) == 0 {
		return keys, nil
	}
	if err := s.getKeys(ctx, mark, cmds, movable, keys); err != nil {
		return nil, err
	}
	for _, i := range movable {
		if specs[i].write && len(keys[i]) == 0 {
			return nil, cmdErr(i, cmds[i], invalid("%s writes without naming a key", specs[i].name))
		}
		if err := s.checkKeys(resource, mark, keys[i]); err != nil {
			return nil, cmdErr(i, cmds[i], err)
		}
	}
	return keys, nil
}

// getKeys asks the server for the keys of cmds[i], i in which (COMMAND GETKEYS),
// in one pipelined round trip to the node serving mark, and stores them in keys.
// A command whose keys the server cannot tell is refused.
func (s *Store) getKeys(ctx context.Context, mark string, cmds []redis.Cmder, which []int, keys [][]string) error {
	node, err := s.node(ctx, mark)
	if err != nil {
		return fmt.Errorf("redisfence: asking the server for keys (COMMAND GETKEYS): %w", err)
	}
	p := node.Pipeline()
	gk := make([]*redis.StringSliceCmd, len(which))
	for j, i := range which {
		gk[j] = redis.NewStringSliceCmd(ctx, append([]any{"command", "getkeys"}, cmds[i].Args()...)...)
		_ = p.Process(ctx, gk[j])
	}
	_, _ = p.Exec(ctx)
	for j, i := range which {
		err := gk[j].Err()
		switch {
		case err == nil:
			keys[i] = gk[j].Val()
		case serverError(err):
			return cmdErr(i, cmds[i], invalid("the server cannot tell its keys (COMMAND GETKEYS): %v", err))
		default:
			return fmt.Errorf("redisfence: asking the server for keys (COMMAND GETKEYS): %w", err)
		}
	}
	return nil
}

func (s *Store) checkKeys(resource, mark string, keys []string) error {
	for _, k := range keys {
		if err := s.checkKey(resource, mark, k); err != nil {
			return err
		}
	}
	return nil
}

func cmdErr(i int, c redis.Cmder, err error) error {
	return fmt.Errorf("command %d (%s): %w", i+1, c.Name(), err)
}

func strArgs(args []any, from, to, step int) ([]string, error) {
	if to > len(args) {
		return nil, invalid("%v: too few arguments", args)
	}
	var keys []string
	for i := from; i < to; i += step {
		switch k := args[i].(type) {
		case string:
			keys = append(keys, k)
		case []byte:
			keys = append(keys, string(k))
		default:
			return nil, invalid("%v: key %v is a %T, want a string", args, k, k)
		}
	}
	return keys, nil
}
