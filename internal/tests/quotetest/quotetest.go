// Package quotetest reads quoted SQL identifiers back, for the fuzz and hostile-name
// tests of the adapters and the migration generator: a name the code under test
// quoted must read back as exactly the identifiers it was given.
package quotetest

import "strings"

// Idents reads s as SQL identifiers quoted with q (q doubled inside) joined by
// dots, and reports false for anything else: a quoted name that ends early, or
// text outside the quotes, would be SQL of its own.
func Idents(s string, q byte) ([]string, bool) {
	var parts []string
	for {
		if s == "" || s[0] != q {
			return nil, false
		}
		s = s[1:]
		var b strings.Builder
		for {
			i := strings.IndexByte(s, q)
			if i < 0 {
				return nil, false
			}
			b.WriteString(s[:i])
			s = s[i+1:]
			if s != "" && s[0] == q {
				b.WriteByte(q)
				s = s[1:]
				continue
			}
			break
		}
		parts = append(parts, b.String())
		if s == "" {
			return parts, true
		}
		if s[0] != '.' {
			return nil, false
		}
		s = s[1:]
	}
}
