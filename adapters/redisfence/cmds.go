package redisfence

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// notInScript are commands Redis refuses inside a script, or that would change the
// connection under it: refused before any I/O, so that a fenced transaction never
// stops halfway.
var notInScript = map[string]bool{
	"multi": true, "exec": true, "discard": true, "watch": true, "unwatch": true,
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "script": true,
	"fcall": true, "fcall_ro": true, "function": true, "select": true, "swapdb": true,
	"subscribe": true, "psubscribe": true, "ssubscribe": true, "unsubscribe": true,
	"punsubscribe": true, "sunsubscribe": true, "monitor": true, "sync": true, "psync": true,
	"auth": true, "hello": true, "client": true, "reset": true, "quit": true, "shutdown": true,
	"blpop": true, "brpop": true, "brpoplpush": true, "blmove": true, "bzpopmin": true,
	"bzpopmax": true, "blmpop": true, "bzmpop": true, "xread": true, "xreadgroup": true,
	"wait": true, "waitaof": true, "failover": true, "replicaof": true, "slaveof": true,
	"debug": true, "config": true, "cluster": true, "readonly": true, "readwrite": true,
}

// checkCmd refuses a command a fenced transaction cannot run or answer.
func checkCmd(c redis.Cmder) error {
	args := c.Args()
	if len(args) == 0 {
		return invalid("empty command")
	}
	if name := strings.ToLower(c.Name()); notInScript[name] {
		return invalid("%s cannot run in a fenced transaction (a Lua script)", name)
	}
	switch c.(type) {
	case *redis.Cmd, *redis.StatusCmd, *redis.IntCmd, *redis.StringCmd, *redis.BoolCmd,
		*redis.FloatCmd, *redis.SliceCmd, *redis.StringSliceCmd, *redis.IntSliceCmd,
		*redis.BoolSliceCmd, *redis.MapStringStringCmd:
		return nil
	}
	return invalid("the Store cannot fill a %T from a script's reply; queue the command with tx.Do", c)
}

// cmdKeys returns the keys a command names, for the slot check and the script's
// KEYS. Commands not listed take the key at position 1, as most do; the server
// refuses a script that touches a key of another slot on a Cluster all the same.
func cmdKeys(c redis.Cmder) ([]string, error) {
	args := c.Args()
	from, step, to := 1, 1, 2 // args[from:to] every step-th
	switch strings.ToLower(c.Name()) {
	case "del", "unlink", "exists", "touch", "sunionstore", "sinterstore", "sdiffstore",
		"pfmerge", "pfcount", "sinter", "sunion", "sdiff", "mget":
		to = len(args)
	case "mset", "msetnx":
		to, step = len(args), 2
	case "rename", "renamenx", "smove", "lmove", "rpoplpush", "copy", "geosearchstore", "zrangestore":
		to = 3
	case "bitop":
		from, to = 2, len(args)
	case "zunionstore", "zinterstore", "zdiffstore":
		n, err := intArg(args, 2)
		if err != nil {
			return nil, err
		}
		keys, err := strArgs(args, 1, 2, 1)
		if err != nil {
			return nil, err
		}
		more, err := strArgs(args, 3, 3+n, 1)
		return append(keys, more...), err
	case "ping", "echo", "time", "dbsize", "lastsave", "randomkey":
		return nil, nil
	}
	return strArgs(args, from, min(to, len(args)), step)
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

func intArg(args []any, i int) (int, error) {
	if i < len(args) {
		switch v := args[i].(type) {
		case int:
			return v, nil
		case int64:
			return int(v), nil
		case string:
			if n, err := strconv.Atoi(v); err == nil {
				return n, nil
			}
		}
	}
	return 0, invalid("%v: no key count at position %d", args, i)
}

// fill sets c's result from its reply in the script's reply (RESP2: integers,
// strings, arrays, nil, error replies).
func fill(c redis.Cmder, v any) {
	if err, ok := v.(error); ok {
		c.SetErr(err)
		return
	}
	if v == nil {
		if b, ok := c.(*redis.BoolCmd); ok {
			b.SetVal(false) // SET NX that did not set: false, as go-redis reads it
			return
		}
		c.SetErr(redis.Nil)
		return
	}
	switch c := c.(type) {
	case *redis.Cmd:
		c.SetVal(v)
	case *redis.StatusCmd:
		c.SetVal(str(v))
	case *redis.StringCmd:
		c.SetVal(str(v))
	case *redis.IntCmd:
		n, err := toInt(v)
		setOr(c, err, func() { c.SetVal(n) })
	case *redis.BoolCmd:
		n, err := toInt(v)
		if _, ok := v.(string); ok {
			n, err = 1, nil // a status reply (SET ... NX that set: OK)
		}
		setOr(c, err, func() { c.SetVal(n == 1) })
	case *redis.FloatCmd:
		f, err := strconv.ParseFloat(str(v), 64)
		setOr(c, err, func() { c.SetVal(f) })
	case *redis.SliceCmd:
		a, _ := v.([]any)
		c.SetVal(a)
	case *redis.StringSliceCmd:
		a, _ := v.([]any)
		out := make([]string, len(a))
		for i := range a {
			out[i] = str(a[i])
		}
		c.SetVal(out)
	case *redis.IntSliceCmd:
		a, _ := v.([]any)
		out := make([]int64, len(a))
		for i := range a {
			out[i], _ = toInt(a[i])
		}
		c.SetVal(out)
	case *redis.BoolSliceCmd:
		a, _ := v.([]any)
		out := make([]bool, len(a))
		for i := range a {
			n, _ := toInt(a[i])
			out[i] = n == 1
		}
		c.SetVal(out)
	case *redis.MapStringStringCmd:
		a, _ := v.([]any)
		m := make(map[string]string, len(a)/2)
		for i := 0; i+1 < len(a); i += 2 {
			m[str(a[i])] = str(a[i+1])
		}
		c.SetVal(m)
	}
}

func setOr(c redis.Cmder, err error, set func()) {
	if err != nil {
		c.SetErr(fmt.Errorf("redisfence: reply of %s: %w", c.Name(), err))
		return
	}
	set()
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprint(v)
}

func toInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("not an integer: %v", v)
}
