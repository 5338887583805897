// Command fencectl shows and releases fencegate's locks in etcd, and shows the
// high-water tokens a database has stored, for operators.
//
//	fencectl [flags] list                  held locks: name, token, holder, lease time left
//	fencectl [flags] show NAME             one lock
//	fencectl [flags] release NAME TOKEN    release NAME only if it still carries TOKEN
//	fencectl [flags] tokens [RESOURCE]     stored tokens in fence_tokens (all, or one resource)
//	fencectl [flags] fence RESOURCE...     raise each resource's stored token to etcd's next
//	                                       token: every holder granted so far is refused
//	fencectl [flags] watch NAME            print every change of NAME's holder until
//	                                       interrupted ('PREFIX*': every lock under it)
//	fencectl [flags] exec [-ttl D] [-try] [-grace D] NAME -- COMMAND [ARGS...]
//	                                       run COMMAND while holding NAME (see below)
//
// With -dsn, list and show add each lock's stored mark (MARK), its token minus
// the mark (DIFF) and what that means (STATE: unwritten, written, fenced).
//
// Flags (also accepted after the command; environment in brackets):
//
//	-endpoints URLS   etcd endpoints, comma-separated [FENCECTL_ENDPOINTS] (default 127.0.0.1:2379)
//	-prefix P         lock key prefix (default /fencegate/locks/) [FENCECTL_PREFIX]
//	-cacert, -cert, -key FILE   TLS: CA bundle, client certificate and key
//	-user U           etcd user [FENCECTL_USER]; -password P [FENCECTL_PASSWORD]
//	-dsn DSN          database for tokens [FENCECTL_DSN]: postgres:// or postgresql://
//	                  (pgx), a MySQL DSN (user:pass@tcp(host)/db), else a SQLite file
//	                  path (optionally prefixed sqlite:)
//	-timeout D        bound on each command's I/O (default 5s)
//	-json             print JSON instead of a table
//	-release          fence: also release each lock key, conditioned on its holder's token
//
// Exit status: 0 success, 1 failure (etcd or the database unreachable, an unknown
// lock, a token that does not hold the lock), 2 bad usage.
//
// exec takes the lock NAME, waiting while another holds it (-try: exit at once
// with status 75 instead, running nothing), runs COMMAND with FENCEGATE_LOCK
// (the name) and FENCEGATE_TOKEN (its fencing token, for the command's fenced
// writes) in its environment, releases the lock when it ends and exits with its
// status (128+N if signal N ended it; 127 if it could not be started). If the lock
// is lost meanwhile (the session lease ran out, or someone deleted its key, as
// fencectl release does), COMMAND gets SIGTERM, SIGKILL after -grace (default
// 10s), and the status is 76. -ttl (default 10s) is the session lease: how long a
// frozen or cut-off fencectl keeps the lock. An interrupt or SIGTERM is passed on
// to COMMAND the same way, then the lock is released. Status 1 means fencectl
// failed before COMMAND ran (etcd unreachable). A fencectl that is itself frozen
// past its lease cannot stop COMMAND until it wakes: COMMAND's writes fenced with
// FENCEGATE_TOKEN are what the database refuses once a successor wrote.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is fencectl with its arguments (without the program name); it returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultConfig()
	gfs := cfg.flags("fencectl", stderr)
	if err := gfs.Parse(args); err != nil {
		return 2
	}
	args = gfs.Args()
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, args := args[0], args[1:]
	if cmd == "exec" {
		return runExec(ctx, &cfg, args, stdout, stderr)
	}
	fs := cfg.flags("fencectl "+cmd, stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	args = fs.Args()
	var c command
	switch cmd {
	case "list":
		c = command{nargs: 0, run: cmdList}
	case "show":
		c = command{nargs: 1, usage: "NAME", run: cmdShow}
	case "release":
		c = command{nargs: 2, usage: "NAME TOKEN (the holder's token: fencectl show NAME)", run: cmdRelease}
	case "tokens":
		c = command{nargs: -1, usage: "[RESOURCE]", run: cmdTokens}
	case "fence":
		c = command{nargs: -2, usage: "[-release] RESOURCE... (or -all)", run: cmdFence}
	case "watch":
		c = command{nargs: 1, usage: "NAME (or 'PREFIX*')", run: cmdWatch, long: true}
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "fencectl: unknown command %q\n", cmd)
		usage(stderr)
		return 2
	}
	if (c.nargs >= 0 && len(args) != c.nargs) || (c.nargs == -1 && len(args) > 1) || (c.nargs == -2 && len(args) == 0 && !cfg.all) {
		fmt.Fprintf(stderr, "fencectl: usage: fencectl [flags] %s %s\n", cmd, c.usage)
		return 2
	}
	if !c.long {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}
	if err := c.run(ctx, &cfg, args, stdout); err != nil {
		fmt.Fprintf(stderr, "fencectl %s: %v\n", cmd, err)
		if _, ok := err.(usageError); ok {
			return 2
		}
		return 1
	}
	return 0
}

type command struct {
	nargs int  // -1: zero or one; -2: one or more
	long  bool // runs until interrupted: no -timeout on the whole command
	usage string
	run   func(ctx context.Context, cfg *config, args []string, out io.Writer) error
}

// usageError is a bad argument: exit status 2.
type usageError string

func (e usageError) Error() string { return string(e) }

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: fencectl [flags] COMMAND [args]

commands:
  list                 held locks with holder, token and lease time left
  show NAME            one lock
  release NAME TOKEN   release NAME if it still carries TOKEN
  tokens [RESOURCE]    high-water tokens stored in the database's fence_tokens (-dsn)
  fence RESOURCE...    raise each stored token to etcd's next token (-dsn): every
                       holder granted so far is refused; -release also frees the lock
  watch NAME           print every change of NAME's holder until interrupted
                       ('PREFIX*' for every lock whose name starts with PREFIX)
  exec [-ttl D] [-try] [-grace D] NAME -- COMMAND [ARGS...]
                       run COMMAND holding NAME (FENCEGATE_LOCK, FENCEGATE_TOKEN in
                       its environment); its status passes through; 75: -try and
                       held; 76: lock lost, COMMAND stopped (SIGTERM, then SIGKILL)

With -dsn, list and show add the stored mark, token - mark and the state.

flags (also after the command): -endpoints, -prefix, -cacert, -cert, -key, -user,
-password, -dsn, -timeout, -json, -release; environment FENCECTL_ENDPOINTS, FENCECTL_PREFIX,
FENCECTL_USER, FENCECTL_PASSWORD, FENCECTL_DSN.
`)
}
