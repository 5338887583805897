package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// command is one fencectl command: what its help says, the shared flags it
// takes, and how it runs (exec runs apart: see runExec).
type command struct {
	name    string
	args    string // its arguments, for the usage line
	short   string // one line for fencectl's command list
	about   string // what -h says it does, a few lines
	example string
	flags   flagSet // the shared flags it takes, besides -timeout
	nargs   int     // -1: zero or one; -2: one or more
	long    bool    // runs until interrupted: no -timeout on the whole command
	run     func(ctx context.Context, cfg *config, args []string, out io.Writer) error
}

// commands returns fencectl's commands in the order its usage lists them.
func commands() []*command {
	return []*command{
		{name: "list", short: "held locks and permits: name, token, holder, lease time left",
			about:   "Print every held lock under -prefix: name, token, holder and lease time left.\nWith -dsn, also each lock's stored mark, token - mark, and the state\n(unwritten, written, fenced).",
			example: "fencectl list -dsn postgres://app@db.internal/app",
			flags:   etcdFlags | dsnFlag | jsonFlag, run: cmdList},
		{name: "show", args: "NAME | SEMAPHORE/*", short: "one lock, or a semaphore's permits",
			about:   "Print the lock (or permit slot) NAME as list does, then who waits for it,\nin line order, with the token each will hold (-json: \"waiting\"). SEMAPHORE/*\n(or the semaphore's name) prints every permit held of it, one slot a line.",
			example: "fencectl show invoice-42",
			flags:   etcdFlags | dsnFlag | jsonFlag, nargs: 1, run: cmdShow},
		{name: "release", args: "NAME TOKEN", short: "release NAME only if it still carries TOKEN",
			about:   "Release the lock NAME if it still carries TOKEN (the holder's token:\nfencectl show NAME); a later holder's lock is left alone.",
			example: "fencectl release invoice-42 1734",
			flags:   etcdFlags, nargs: 2, run: cmdRelease},
		{name: "tokens", args: "[RESOURCE]", short: "stored tokens in fence_tokens (all, or one resource)",
			about:   "Print the high-water tokens the database (-dsn) stored in fence_tokens:\nevery resource's, or RESOURCE's.",
			example: "fencectl tokens -dsn postgres://app@db.internal/app invoice-42",
			flags:   dsnFlag | jsonFlag, nargs: -1, run: cmdTokens},
		{name: "fence", args: "[-new] RESOURCE... | -all", short: "raise each stored token to etcd's next: every holder so far is refused",
			about: "Raise each RESOURCE's stored token (-dsn) to etcd's next token, so every\n" +
				"holder granted so far is refused where it writes; -release also frees each\n" +
				"lock key, conditioned on its holder's token. A RESOURCE with neither a lock\n" +
				"held nor a mark stored is refused (a typo?) unless -new is given.\n\n" +
				"A holder still alive keeps its lock: its writes are refused (fence.ErrStale)\n" +
				"until it releases and acquires again, which gets a token above the mark. A new\n" +
				"holder waits for it, as for any holder, unless -release frees the key (which\n" +
				"ends the old holder's lock).\n\n" +
				"-all fences every mark stored and every lock held: run it after promoting a\n" +
				"replica that may lag. The same holds there: each live holder must release and\n" +
				"re-acquire to write again, and without -release the next holder waits for it.",
			example: "fencectl fence -dsn postgres://app@db.internal/app -release invoice-42",
			flags:   etcdFlags | dsnFlag | jsonFlag | releaseFlag | fenceAllFlag | newFlag, nargs: -2, run: cmdFence},
		{name: "watch", args: "[-exact] NAME | 'PREFIX*'", short: "print every change of NAME's holder until interrupted",
			about: "Print the holder of NAME, then every grant and end of a hold (released,\n" +
				"expired) until interrupted; 'PREFIX*' watches every lock whose name starts\n" +
				"with PREFIX, 'SEMAPHORE/*' every permit of a semaphore. -exact watches the\n" +
				"one lock named NAME, a trailing * included\n" +
				"(fencectl watch -exact 'report-*' watches the lock named report-*).",
			example: "fencectl watch 'nightly-*'",
			flags:   etcdFlags | jsonFlag | exactFlag, nargs: 1, long: true, run: cmdWatch},
		{name: "exec", args: "[-ttl D] [-try] [-grace D] NAME -- COMMAND [ARGS...]", short: "run COMMAND while holding NAME",
			about:   "Run COMMAND while holding the lock NAME, with FENCEGATE_LOCK and\nFENCEGATE_TOKEN in its environment; exit with its status. 75: -try and held,\nnothing run; 76: the lock was lost and COMMAND stopped (SIGTERM, SIGKILL after\n-grace); 1: etcd not reached within -timeout, nothing run.",
			example: "fencectl exec -ttl 15s nightly-report -- ./report.sh --date today",
			flags:   etcdFlags},
	}
}

func commandNamed(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// flagSet is c's flag set over cfg; -h prints c's help.
func (c *command) flagSet(cfg *config, stderr io.Writer) *flag.FlagSet {
	fs := cfg.flags("fencectl "+c.name, c.flags, stderr)
	fs.Usage = func() { c.help(cfg, fs.Output()) }
	return fs
}

// help prints c's usage line, what it does, its own flags and an example.
func (c *command) help(cfg *config, w io.Writer) {
	fs := cfg.flags("fencectl "+c.name, c.flags, w)
	if c.name == "exec" {
		execFlags(fs)
	}
	fmt.Fprintf(w, "usage: fencectl %s %s\n\n%s\n\nflags:\n", c.name, c.args, c.about)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\nexample:\n  %s\n", c.example)
}
