package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
	"github.com/fencegate/fencegate/fence"
)

// TestStore_Fenced_everyWriteKey reads the server's own command table (COMMAND:
// every command and subcommand with its key specifications) and, for every key
// specification that writes (flags RW, OW or RM: STORE forms, *STORE, COPY,
// RENAME, MOVE, SORT ... STORE, GEORADIUS ... STORE, ...), builds the command
// from the server's own syntax (COMMAND DOCS) with that key aimed at a mark and
// every other key at a data key of the mark's resource. The server confirms the
// mark is one of the command's keys (COMMAND GETKEYS); Fenced at a higher token
// must refuse it, and the servers' command statistics must show that no such
// command, nor any script, reached them; the mark is as it was. On a single node
// and on a Cluster.
func TestStore_Fenced_everyWriteKey(t *testing.T) {
	t.Run("node", func(t *testing.T) {
		raw := ownNode(t)
		e := envOn(t, raw, redis.NewClient(&redis.Options{Addr: raw.Options().Addr}))
		aimAtMark(t, e, raw, []*redis.Client{raw})
	})
	t.Run("cluster", func(t *testing.T) {
		e := newClusterEnv(t)
		cc := e.raw.(*redis.ClusterClient)
		var mu sync.Mutex
		var masters []*redis.Client
		if err := cc.ForEachMaster(t.Context(), func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			masters = append(masters, m)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(t.Context(), redisfence.MarkKey(e.res("r")))
		if err != nil {
			t.Fatal(err)
		}
		aimAtMark(t, e, m, masters)
	})
}

// aimAtMark runs TestStore_Fenced_everyWriteKey on e's Store: raw is a client of
// the node serving the mark, nodes every node whose statistics count.
func aimAtMark(t *testing.T, e *env, raw *redis.Client, nodes []*redis.Client) {
	t.Helper()
	ctx := t.Context()
	res := e.res("r")
	mark, data := redisfence.MarkKey(res), e.key(res, "d")
	if err := raw.HSet(ctx, mark, "token", 7).Err(); err != nil {
		t.Fatal(err)
	}
	cmds := writeCommands(t, raw, mark, data)
	if len(cmds) < 60 {
		t.Fatalf("%d write key specifications in the server's command table; expected Redis 7's (over 60)", len(cmds))
	}
	for _, n := range nodes {
		if err := n.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	refusedByName := 0
	for _, c := range cmds {
		err := e.store.Fenced(ctx, fence.NewGrant(res, 9), func(tx redis.Pipeliner) error {
			tx.Do(ctx, c.args...)
			return nil
		})
		switch {
		case !errors.Is(err, fence.ErrInvalidArgument):
			t.Errorf("%v: Fenced = %v, want it refused", c.args, err)
		case strings.Contains(err.Error(), "cannot run in a fenced transaction"):
			refusedByName++
		case !strings.Contains(err.Error(), "the Store's own"):
			t.Errorf("%v: Fenced = %v, want it refused for the mark key", c.args, err)
		}
	}
	reached := 0
	for _, n := range nodes {
		stats := commandStats(t, n)
		for _, c := range cmds {
			reached += stats[c.name]
		}
		reached += stats["eval"] + stats["evalsha"]
	}
	t.Logf("%d write key specifications aimed at the mark: %d refused by the mark key, %d by the command; %d commands reached the server", len(cmds), len(cmds)-refusedByName, refusedByName, reached)
	if reached != 0 {
		t.Errorf("%d commands aimed at the mark reached the server", reached)
	}
	if m, err := raw.HGetAll(ctx, mark).Result(); err != nil || len(m) != 1 || m["token"] != "7" {
		t.Fatalf("mark is %v, %v; want token 7 alone", m, err)
	}
}

// ownNode starts a redis-server of the test's own, whose command statistics no
// other test touches, and returns a client of it.
func ownNode(t *testing.T) *redis.Client {
	t.Helper()
	if os.Getenv(redistest.EnvURL) != "" {
		t.Skip("reads the command statistics of a server of its own")
	}
	n, err := redistest.StartNode(t.Context())
	if err != nil {
		node.Options(t) // skips (or fails where CI is set) when there is no server at all
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	raw := redis.NewClient(&redis.Options{Addr: n.Addr})
	t.Cleanup(func() { raw.Close() })
	return raw
}

// writeCmd is a command built to write a mark through one key specification.
type writeCmd struct {
	name string // as COMMAND names it: "sort", "xgroup|create"
	args []any
}

// writeCommands builds, for every write key specification of every command and
// subcommand, the command aimed at mark through it, and checks with the server
// that mark is among its keys.
func writeCommands(t *testing.T, raw *redis.Client, mark, data string) []writeCmd {
	t.Helper()
	ctx := t.Context()
	table, err := raw.Do(ctx, "command").Slice()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := raw.Do(ctx, "command", "docs").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []writeCmd
	var visit func(entry any, docs map[any]any)
	visit = func(entry any, docs map[any]any) {
		a := entry.([]any)
		name := a[0].(string)
		doc, _ := docs[name].(map[any]any)
		for i, spec := range a[8].([]any) {
			flags := fmt.Sprint(spec.(map[any]any)["flags"])
			if !regexp.MustCompile(`\b(RW|OW|RM)\b`).MatchString(flags) {
				continue
			}
			words := strings.Split(name, "|")
			args := make([]any, 0, 8)
			for _, w := range words {
				args = append(args, w)
			}
			args = buildArgs(args, argsOf(doc), i, mark, data)
			out = append(out, writeCmd{name: name, args: args})
		}
		if len(a) >= 10 {
			subs, _ := doc["subcommands"].(map[any]any)
			for _, s := range a[9].([]any) {
				visit(s, subs)
			}
		}
	}
	for _, entry := range table {
		visit(entry, docs.(map[any]any))
	}
	for _, c := range out {
		keys, err := raw.CommandGetKeys(ctx, c.args...).Result()
		if err != nil || !slices.Contains(keys, mark) {
			t.Errorf("%v: the server names its keys %v, %v; want the mark among them", c.args, keys, err)
		}
	}
	return out
}

func argsOf(doc map[any]any) []any {
	a, _ := doc["arguments"].([]any)
	return a
}

// buildArgs appends to out the arguments docs describe: every required one and
// every optional one holding a key of key specification target, that key as mark
// and every other key as data, each multiple argument once, each choice (oneof)
// by pickBranch.
func buildArgs(out []any, docs []any, target int, mark, data string) []any {
	for _, d := range docs {
		a := d.(map[any]any)
		if strings.Contains(fmt.Sprint(a["flags"]), "optional") && !holds(a, target) {
			continue
		}
		if tok, ok := a["token"].(string); ok {
			out = append(out, tok)
		}
		switch a["type"] {
		case "key":
			if ks, ok := a["key_spec_index"].(int64); ok && int(ks) == target {
				out = append(out, mark)
			} else {
				out = append(out, data)
			}
		case "pure-token":
		case "block":
			out = buildArgs(out, argsOf(a), target, mark, data)
		case "oneof":
			pick := pickBranch(argsOf(a), target)
			out = buildArgs(out, []any{pick}, target, mark, data)
		case "pattern":
			out = append(out, "*")
		default: // integer, double, unix-time, string
			out = append(out, "1")
		}
	}
	return out
}

// pickBranch picks the branch of a choice that holds a key of key specification
// target, else one that holds no key ("" for MIGRATE's key with KEYS), else the
// first.
func pickBranch(branches []any, target int) any {
	for _, b := range branches {
		if holds(b.(map[any]any), target) {
			return b
		}
	}
	for _, b := range branches {
		if !holds(b.(map[any]any), -1) {
			return b
		}
	}
	return branches[0]
}

// holds reports whether the argument a is, or holds, a key of key specification
// target, or any key for target -1.
func holds(a map[any]any, target int) bool {
	if ks, ok := a["key_spec_index"].(int64); ok && a["type"] == "key" && (int(ks) == target || target < 0) {
		return true
	}
	for _, b := range argsOf(a) {
		if holds(b.(map[any]any), target) {
			return true
		}
	}
	return false
}

var cmdstatLine = regexp.MustCompile(`cmdstat_([\w|-]+):calls=(\d+)`)

// commandStats returns the server's count of calls by command (INFO
// commandstats), commands called from scripts included.
func commandStats(t *testing.T, raw *redis.Client) map[string]int {
	t.Helper()
	info, err := raw.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range cmdstatLine.FindAllStringSubmatch(info, -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	return out
}
