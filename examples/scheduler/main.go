// Command scheduler runs a job schedule on exactly one machine at a time, with
// fenced leadership (lockclient's Lead), and shows what happens when the
// leader freezes past its lease.
//
// Two scheduler processes (this binary again, in the scheduler role) campaign
// for the lock "scheduler". Scheduler 1 leads and runs a job every interval,
// storing each in the database fenced by its term's token; Scheduler 2 follows
// (it watches the lock and knows the leader's address). Scheduler 1 is frozen
// with SIGSTOP in the middle of a job, as a stop-the-world pause would; its
// lease runs out, Scheduler 2 takes over within about a lease with a higher
// token and goes on with the schedule. When Scheduler 1 wakes (SIGCONT) its
// overdue job writes with its old token, and the database refuses it.
//
// With no flags it starts a throwaway etcd member and uses a SQLite file:
//
//	go run ./examples/scheduler
//	go run ./examples/scheduler -lease 5s -etcd http://10.0.0.1:2379
//
// The exit status is 0 only when the run showed what it claims (Scheduler 2
// took over with a higher token and stored jobs, Scheduler 1's late job was
// refused, every stored job carries the token of the term that ran it), 1
// otherwise and 2 for bad flags.
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lease := fs.Duration("lease", 2*time.Second, "each scheduler's session lease (whole seconds, at least 2s)")
	every := fs.Duration("every", 500*time.Millisecond, "the schedule: a job every interval")
	etcd := fs.String("etcd", "", "comma-separated etcd endpoints (default: start a throwaway etcd member)")
	role := fs.String("role", "", "internal: scheduler runs one scheduler process")
	name := fs.String("name", "", "internal: the scheduler's name")
	addr := fs.String("addr", "", "internal: the scheduler's address, stored with its term")
	dbPath := fs.String("db", "", "internal: the SQLite file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *lease < 2*time.Second || *lease%time.Second != 0 || *every <= jobWork {
		fmt.Fprintf(stderr, "scheduler: -lease must be whole seconds >= 2s and -every above %v\n", jobWork)
		return 2
	}
	if *role == "scheduler" {
		if err := runScheduler(ctx, *name, *addr, strings.Split(*etcd, ","), *dbPath, *lease, *every, stdout); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", *name, err)
			return 1
		}
		return 0
	}
	ok, err := orchestrate(ctx, *etcd, *lease, *every, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "scheduler: %v\n", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}
