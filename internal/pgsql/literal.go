package pgsql

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/internal/grant"
)

// RaiseLiteral is Raise with c's values written into the SQL as literals, to send
// without parameters: over the simple protocol nothing is prepared, so a transaction
// pooler may run it on any server connection. Strings are E'...' literals, quoted
// the same whatever standard_conforming_strings says; a NUL byte is refused.
func RaiseLiteral(c *grant.Checked, idleMS string) (string, error) {
	q, args := Raise(c, idleMS)
	lits := make([]string, len(args))
	for i, a := range args {
		var err error
		if lits[i], err = literal(a); err != nil {
			return "", err
		}
	}
	// One pass over q, no regexp: this runs on every raise of sqlfence. The raise has
	// no '$' of its own, and Raise gives a value for each of its placeholders.
	var b strings.Builder
	b.Grow(len(q) + 64)
	for i := 0; i < len(q); i++ {
		j := i + 1
		for q[i] == '$' && j < len(q) && q[j] >= '0' && q[j] <= '9' {
			j++
		}
		if j == i+1 {
			b.WriteByte(q[i])
			continue
		}
		n, _ := strconv.Atoi(q[i+1 : j])
		b.WriteString(lits[n-1])
		i = j - 1
	}
	return b.String(), nil
}

func literal(a any) (string, error) {
	switch v := a.(type) {
	case string:
		if strings.IndexByte(v, 0) >= 0 {
			return "", errors.New("a resource name holds a NUL byte")
		}
		return "E'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `'`, `''`) + "'", nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case []string:
		parts := make([]string, len(v))
		for i, s := range v {
			var err error
			if parts[i], err = literal(s); err != nil {
				return "", err
			}
		}
		return "ARRAY[" + strings.Join(parts, ", ") + "]", nil
	}
	return "", fmt.Errorf("pgsql: no literal for a %T", a)
}
