// Command gcpause replays the GC-pause timeline for real and prints it as a table.
//
// Two worker processes (this binary again, in the server role) take the lock
// account-42 in etcd. Server 1 takes it, renews it and gets its invoice ready; then
// it is frozen with SIGSTOP, as a stop-the-world pause freezes a process, while its
// lease runs out. Server 2 takes the lock with a higher fencing token and writes the
// invoice. Server 1 is resumed with SIGCONT and writes its stale invoice: with
// fencing the database refuses it; with -no-fence it overwrites Server 2's.
//
// With no flags it starts an embedded etcd and uses a SQLite file, so it needs
// nothing installed:
//
//	go run ./examples/gcpause
//	go run ./examples/gcpause -no-fence
//	go run ./examples/gcpause -etcd http://10.0.0.1:2379 -postgres postgres://...
//
// The exit status is 0 only when the run showed what it claims: with fencing, Server
// 1's write refused and Server 2's invoice stored; with -no-fence, the stale write
// stored. It is 1 otherwise and 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// dsnEnv passes the database DSN to the workers without showing it in ps.
const dsnEnv = "GCPAUSE_DSN"

// config is what the flags select.
type config struct {
	lease     time.Duration
	resource  string
	endpoints []string // empty: start an embedded etcd
	db        backend
	noFence   bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args and runs the orchestrator or, with -role=server, a worker. It
// returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gcpause", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lease := fs.Duration("lease", 10*time.Second, "lease of each lock, whole seconds; the timeline scales with it (the run takes about twice the lease)")
	resource := fs.String("resource", "account-42", "name of the lock and of the invoice's account")
	etcd := fs.String("etcd", "", "comma-separated etcd endpoints of a running cluster (default: start an embedded etcd)")
	pg := fs.String("postgres", "", "PostgreSQL DSN: write the invoice there through pgxfence (default: a SQLite file)")
	my := fs.String("mysql", "", "MySQL/MariaDB DSN: write the invoice there through sqlfence")
	lite := fs.String("sqlite", "", "SQLite file to use and keep (default: a temporary file, removed at exit)")
	noFence := fs.Bool("no-fence", false, "write without fencing, to show the stale invoice overwriting the new one")
	role := fs.String("role", "", "internal: server runs a worker process driven over stdin/stdout")
	name := fs.String("name", "", "internal: the worker's name")
	kind := fs.String("db", "", "internal: the worker's database kind")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gcpause [-no-fence] [-lease d] [-etcd endpoints] [-postgres dsn | -mysql dsn | -sqlite file]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gcpause: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg := config{lease: *lease, resource: *resource, noFence: *noFence}
	if *etcd != "" {
		for _, e := range strings.Split(*etcd, ",") {
			if e = strings.TrimSpace(e); e != "" {
				cfg.endpoints = append(cfg.endpoints, e)
			}
		}
	}

	if *role == "server" {
		cfg.db = backend{kind: *kind, dsn: os.Getenv(dsnEnv)}
		if err := serve(ctx, *name, cfg, os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return 1
		}
		return 0
	} else if *role != "" {
		fmt.Fprintf(stderr, "gcpause: unknown -role %q\n", *role)
		return 2
	}

	if err := cfg.check(*pg, *my, *lite); err != nil {
		fmt.Fprintf(stderr, "gcpause: %v\n", err)
		return 2
	}
	if err := orchestrate(ctx, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "gcpause: FAILED: %v\n", err)
		return 1
	}
	return 0
}

// check validates the orchestrator's flags and picks the database.
func (cfg *config) check(pg, my, lite string) error {
	n := 0
	for _, s := range []string{pg, my, lite} {
		if s != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return errors.New("-postgres, -mysql and -sqlite are exclusive: pick one database")
	case pg != "":
		cfg.db = backend{kind: "postgres", dsn: pg}
	case my != "":
		cfg.db = backend{kind: "mysql", dsn: my}
	default:
		cfg.db = backend{kind: "sqlite", dsn: lite} // an empty file name: a temporary one
	}
	// etcd refuses leases under about 1.5 x its election timeout; the whole run takes
	// about twice the lease, so a minute is the useful limit.
	if cfg.lease < 2*time.Second || cfg.lease > time.Minute || cfg.lease%time.Second != 0 {
		return fmt.Errorf("-lease %v: want whole seconds between 2s and 1m (etcd counts leases in seconds)", cfg.lease)
	}
	if cfg.resource == "" || strings.ContainsAny(cfg.resource, "/\x00") {
		return fmt.Errorf("-resource %q: want a non-empty name without / or NUL", cfg.resource)
	}
	return nil
}
