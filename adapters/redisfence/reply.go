package redisfence

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

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
