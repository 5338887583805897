package redisfence

import "strings"

// WithUncheckedWritesForTest makes Set, HSet and Delete run the write script
// without its check: the mark is overwritten, not raised, and a lower token is
// never refused. The racing-writers test runs with it to show that it can fail.
func WithUncheckedWritesForTest() Option {
	return func(s *Store) error {
		src := strings.Replace(writeLua, "if #t < #m or (#t == #m and t < m) then return {0, m} end", "", 1)
		src = strings.Replace(src, "if #m < #t or (#m == #t and m < t) then redis.call('HSET', KEYS[1], 'token', t) end", "redis.call('HSET', KEYS[1], 'token', t)", 1)
		if src == writeLua {
			panic("redisfence: the write script changed; update WithUncheckedWritesForTest")
		}
		s.write = newScript(src)
		return nil
	}
}

// ParseCommandTableForTest reads reply as the Store reads COMMAND's.
func ParseCommandTableForTest(reply []any) error {
	_, err := parseTable(reply)
	return err
}
