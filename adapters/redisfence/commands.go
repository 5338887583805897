package redisfence

import (
	"context"
	"encoding"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// cmdSpec is what the server's command table (COMMAND) says of one command or
// subcommand: its arity, where its keys are, and whether a fenced transaction
// may run it.
type cmdSpec struct {
	name              string
	arity             int
	first, last, step int  // the keys: args[first..last], every step-th; first 0 for none
	movable           bool // the keys move with the arguments: ask COMMAND GETKEYS
	write             bool
	refused           string // why a fenced transaction cannot run it; "" when it can
	subs              map[string]*cmdSpec
}

// cmdTable is the server's command table by lower-case name.
type cmdTable map[string]*cmdSpec

// commands is a Store's copy of its server's command table, read on the first
// Fenced that queued a command. A failed read is not kept: the next call reads
// again.
type commands struct {
	reading chan struct{} // holds one token while a call reads the table
	tab     atomic.Pointer[cmdTable]
}

func newCommands() *commands { return &commands{reading: make(chan struct{}, 1)} }

// table returns the server's command table, reading it (COMMAND) on first use.
func (s *Store) table(ctx context.Context) (cmdTable, error) {
	if t := s.cmds.tab.Load(); t != nil {
		return *t, nil
	}
	select {
	case s.cmds.reading <- struct{}{}: // one read at a time; the others wait for it
		defer func() { <-s.cmds.reading }()
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrCommandTable, ctx.Err())
	}
	if t := s.cmds.tab.Load(); t != nil {
		return *t, nil
	}
	c := redis.NewSliceCmd(ctx, "command")
	if err := s.rdb.Process(ctx, c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCommandTable, err)
	}
	t, err := parseTable(c.Val())
	if err != nil {
		return nil, err
	}
	s.cmds.tab.Store(&t)
	return t, nil
}

// parseTable reads COMMAND's reply: per command its name, arity, flags, first,
// last and step key positions and (Redis 7) its subcommands in the same form.
// Redis 7 derives the key positions from its key specifications and flags
// movablekeys every command whose keys they cannot describe.
func parseTable(reply []any) (cmdTable, error) {
	t := make(cmdTable, len(reply))
	for _, e := range reply {
		sp, err := parseSpec(e)
		if err != nil {
			return nil, err
		}
		t[sp.name] = sp
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("%w: the server's command table (COMMAND) is empty", ErrCommandTable)
	}
	return t, nil
}

// parseSpec reads one entry of COMMAND's reply.
func parseSpec(e any) (*cmdSpec, error) {
	a, _ := e.([]any)
	if len(a) < 6 {
		return nil, fmt.Errorf("%w: entry %v", ErrCommandTable, e)
	}
	name, _ := a[0].(string)
	flags, ok := a[2].([]any)
	if name == "" || !ok {
		return nil, fmt.Errorf("%w: entry %v: no name or flags", ErrCommandTable, e)
	}
	nums := make([]int, 0, 4) // arity, first, last, step
	for _, i := range []int{1, 3, 4, 5} {
		n, ok := a[i].(int64)
		if !ok {
			return nil, fmt.Errorf("%w: entry %v: position %d is not a number", ErrCommandTable, e, i)
		}
		nums = append(nums, int(n))
	}
	sp := &cmdSpec{name: strings.ToLower(name), arity: nums[0], first: nums[1], last: nums[2], step: nums[3]}
	set := map[string]bool{}
	for _, f := range flags {
		f, _ := f.(string)
		set[strings.ToLower(f)] = true
	}
	sp.movable, sp.write = set["movablekeys"], set["write"]
	if len(a) >= 10 {
		subs, _ := a[9].([]any)
		for _, e := range subs {
			sub, err := parseSpec(e)
			if err != nil {
				return nil, err
			}
			if sp.subs == nil {
				sp.subs = map[string]*cmdSpec{}
			}
			sp.subs[sub.name] = sub
		}
	}
	sp.refused = refusal(sp, set)
	return sp, nil
}

// refusal says why a fenced transaction cannot run a command, or "" when it can:
// commands Redis refuses in a script or that may block, administrative ones, the
// ones that reach another database or server, and writes that name no key (they
// reach every key, marks too).
func refusal(sp *cmdSpec, flags map[string]bool) string {
	switch {
	case flags["noscript"]:
		return "Redis refuses it in a script"
	case flags["blocking"]:
		return "it may block, and a script cannot"
	case flags["admin"]:
		return "it is an administrative command"
	}
	switch sp.name {
	case "select", "swapdb":
		return "it reaches another database, which the marks do not fence"
	case "move":
		return "it moves a key to another database, which the marks do not fence"
	case "migrate":
		return "it moves keys to another server"
	}
	if sp.write && !sp.movable && sp.first <= 0 && sp.subs == nil {
		return "it writes without naming a key: it reaches every key, marks too"
	}
	return ""
}

// lookup finds the spec of the command args (a subcommand's for a container
// command such as XGROUP) and checks its arity and whether it may run.
func (t cmdTable) lookup(name string, args []any) (*cmdSpec, error) {
	sp := t[name]
	if sp == nil {
		return nil, invalid("%s is not a command this server knows (COMMAND)", name)
	}
	if sp.subs != nil && len(args) > 1 {
		full := name + "|" + strings.ToLower(argText(args[1]))
		if sp = sp.subs[full]; sp == nil {
			return nil, invalid("%s %v is not a subcommand this server knows (COMMAND)", name, args[1])
		}
	}
	if n := len(args); (sp.arity > 0 && n != sp.arity) || (sp.arity < 0 && n < -sp.arity) {
		want := fmt.Sprint(sp.arity)
		if sp.arity < 0 {
			want = fmt.Sprintf("at least %d", -sp.arity)
		}
		return nil, invalid("%s: wrong number of arguments: %d with its name, Redis wants %s", sp.name, n, want)
	}
	if sp.refused != "" {
		return nil, invalid("%s cannot run in a fenced transaction: %s", sp.name, sp.refused)
	}
	if sp.name == "copy" && !allReplace(args[3:]) {
		return nil, invalid("copy ... db cannot run in a fenced transaction: it writes another database, which the marks do not fence (only REPLACE may follow COPY's keys)")
	}
	return sp, nil
}

// keys returns the keys of a command whose keys do not move (args[first..last],
// every step-th).
func (sp *cmdSpec) keys(args []any) ([]string, error) {
	if sp.first <= 0 {
		return nil, nil
	}
	last := sp.last
	if last < 0 {
		last += len(args)
	}
	return strArgs(args, sp.first, min(last+1, len(args)), max(sp.step, 1))
}

// allReplace reports whether every one of args is the word REPLACE.
func allReplace(args []any) bool {
	for _, a := range args {
		if !strings.EqualFold(argText(a), "replace") {
			return false
		}
	}
	return true
}

// argText is an argument as go-redis sends it.
func argText(a any) string {
	switch a := a.(type) {
	case string:
		return a
	case []byte:
		return string(a)
	case encoding.BinaryMarshaler:
		b, err := a.MarshalBinary()
		if err != nil {
			return ""
		}
		return string(b)
	}
	return fmt.Sprint(a)
}
