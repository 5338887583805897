// Command fencectl shows and releases fencegate's locks in etcd, and shows the
// high-water tokens a database has stored, for operators.
//
//	fencectl [flags] list                  held locks and permits: name, token, holder, lease time left
//	fencectl [flags] show NAME             one lock (or permit slot; 'SEMAPHORE/*': its permits)
//	fencectl [flags] release NAME TOKEN    release NAME only if it still carries TOKEN
//	fencectl [flags] tokens [RESOURCE]     stored tokens in fence_tokens (all, or one resource)
//	fencectl [flags] fence RESOURCE...     raise each resource's stored token to etcd's next
//	                                       token: every holder granted so far is refused
//	                                       (-new: also a resource with no lock nor mark)
//	fencectl [flags] watch NAME            print every change of NAME's holder until
//	                                       interrupted ('PREFIX*': every lock under it,
//	                                       'SEMAPHORE/*': its permits;
//	                                       -exact NAME: the lock named NAME, * and all)
//	fencectl [flags] exec [-ttl D] [-try] [-grace D] NAME -- COMMAND [ARGS...]
//	                                       run COMMAND while holding NAME (see below)
//
// With -dsn, list and show add each lock's stored mark (MARK), its token minus
// the mark (DIFF) and what that means (STATE: unwritten, written, fenced).
//
// fencectl COMMAND -h prints that command's usage, its own flags and an example.
// Flags (before the command, or after it when the command takes them; environment
// in brackets):
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
// A fenced holder that is still alive keeps its lock, and its writes are refused
// until it releases and acquires again (a new token, above the mark); a new holder
// waits for it as for any holder, unless -release frees the key. fence refuses a
// RESOURCE with neither a lock held nor a mark stored unless -new is given.
//
// Exit status: 0 success, 1 failure (etcd or the database unreachable, an unknown
// lock, a token that does not hold the lock), 2 bad usage, 130 interrupted (SIGINT
// or SIGTERM ended the command before it was done, etcd answering or not).
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
// failed before COMMAND ran: etcd did not answer within -timeout, at the start or
// while waiting (it is asked every -timeout); 130 that an interrupt or SIGTERM
// came before COMMAND ran. A fencectl that is itself frozen
// past its lease cannot stop COMMAND until it wakes: COMMAND's writes fenced with
// FENCEGATE_TOKEN are what the database refuses once a successor wrote.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// exitInterrupted is the status of a command that SIGINT or SIGTERM ended
// before it was done (128+SIGINT, as shells report an interrupt).
const exitInterrupted = 130

// runMain is main without os.Exit: an interrupt (SIGINT) or SIGTERM cancels
// the command's context, so that it ends cleanly, saying so, with
// exitInterrupted, even while etcd does not answer.
func runMain(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, stdout, stderr)
}

// run is fencectl with its arguments (without the program name); it returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultConfig()
	gfs := cfg.flags("fencectl", allFlags, stderr)
	gfs.Usage = func() { usage(stderr) }
	if err := gfs.Parse(args); err != nil {
		return helpOr2(err)
	}
	args = gfs.Args()
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, args := args[0], args[1:]
	switch name {
	case "help", "-h", "--help":
		if len(args) == 1 && commandNamed(args[0]) != nil {
			commandNamed(args[0]).help(&cfg, stdout)
			return 0
		}
		usage(stdout)
		return 0
	}
	c := commandNamed(name)
	if c == nil {
		fmt.Fprintf(stderr, "fencectl: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	if c.name == "exec" {
		return runExec(ctx, &cfg, c, args, stdout, stderr)
	}
	fs := c.flagSet(&cfg, stderr)
	if err := fs.Parse(args); err != nil {
		return helpOr2(err)
	}
	args = fs.Args()
	if (c.nargs >= 0 && len(args) != c.nargs) || (c.nargs == -1 && len(args) > 1) || (c.nargs == -2 && len(args) == 0 && !cfg.all) {
		fmt.Fprintf(stderr, "fencectl: usage: fencectl %s %s\n", c.name, c.args)
		return 2
	}
	interrupted := ctx
	if !c.long {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}
	if err := c.run(ctx, &cfg, args, stdout); err != nil {
		if interrupted.Err() != nil {
			fmt.Fprintf(stderr, "fencectl %s: interrupted\n", c.name)
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "fencectl %s: %v\n", c.name, err)
		if _, ok := err.(usageError); ok {
			return 2
		}
		return 1
	}
	return 0
}

// helpOr2 is the exit status after a failed flag parse: 0 when -h asked for the
// help (printed by the flag set's Usage), 2 for bad usage.
func helpOr2(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// usageError is a bad argument: exit status 2.
type usageError string

func (e usageError) Error() string { return string(e) }

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: fencectl [flags] COMMAND [args]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
	}
	fmt.Fprint(w, `
'fencectl COMMAND -h' prints a command's usage, flags and an example.

flags (before the command, or after it where the command takes them): -endpoints,
-prefix, -cacert, -cert, -key, -user, -password, -dsn, -timeout, -json, -release;
environment FENCECTL_ENDPOINTS, FENCECTL_PREFIX, FENCECTL_USER, FENCECTL_PASSWORD,
FENCECTL_DSN.
`)
}
