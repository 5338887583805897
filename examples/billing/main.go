// Command billing is a worker that does fenced read-modify-write jobs on account
// balances: for each job it takes the account's lock in etcd, reads the balance,
// works a while, and writes the balance plus one with its lock's fencing token,
// inside one transaction that the database refuses if a newer holder has written.
// Every acknowledged (committed) write is logged as a line of JSON on stdout, so a
// checker can hold the database to what the workers said they did. The e2e suite
// runs it in containers and freezes, kills and cuts it off.
//
// See README.md in this directory for the flags, the log format and how to run it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the worker's configuration: flags, each defaulting to an environment
// variable.
type config struct {
	idle        time.Duration // -idle-timeout; 0: the lock\'s lease
	id          string
	etcd        []string
	dsn         string
	lease       time.Duration
	accounts    []string
	think       span
	job         span
	commitDelay span
	timeout     time.Duration
	jobs        int
	noFence     bool
	grant       string
	seed        uint64
	setup       bool
}

func main() {
	// First: as a container's PID 1, a SIGTERM that comes before this is not
	// a clean stop (the runtime exits with 2).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(2)
	}
	if cfg.setup {
		err = setup(ctx, cfg)
	} else {
		err = newWorker(cfg, newLog(os.Stdout, cfg.id)).run(ctx)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(1)
	}
}

func parseConfig(args []string) (config, error) {
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("billing", flag.ContinueOnError)
	var cfg config
	var etcd, accounts, lease, jobs, seed, timeout, idle string
	cfg.think, cfg.job = span{}, span{min: 200 * time.Millisecond, max: 200 * time.Millisecond}
	fs.StringVar(&cfg.id, "id", env("BILLING_WORKER", host), "worker id written with every log line and write (env BILLING_WORKER)")
	fs.StringVar(&etcd, "etcd", env("BILLING_ETCD", "http://127.0.0.1:2379"), "comma-separated etcd endpoints (env BILLING_ETCD)")
	fs.StringVar(&cfg.dsn, "dsn", env("BILLING_DSN", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "database: postgres://..., mysql://user:pass@tcp(host:port)/db or sqlite://path (env BILLING_DSN)")
	fs.StringVar(&lease, "lease", env("BILLING_LEASE", "3s"), "session lease: how long a frozen or cut-off worker keeps its locks; whole seconds, at least 2s (env BILLING_LEASE)")
	fs.StringVar(&accounts, "accounts", env("BILLING_ACCOUNTS", "account-42"), "comma-separated account names, or a count n for account-1..account-n (env BILLING_ACCOUNTS)")
	fs.Var(&cfg.think, "think", "work between taking the lock and the transaction, which does not look at the lock: a duration or a range like 100ms..400ms (env BILLING_THINK)")
	fs.Var(&cfg.job, "job", "work inside the transaction, between reading and writing the balance: a duration or a range (env BILLING_JOB)")
	fs.Var(&cfg.commitDelay, "commit-delay", "work after the writes, before COMMIT: a duration or a range (env BILLING_COMMIT_DELAY)")
	fs.StringVar(&timeout, "timeout", env("BILLING_TIMEOUT", "0s"), "how long a job's transaction may take before its context ends; 0 does not bound it (env BILLING_TIMEOUT)")
	fs.StringVar(&idle, "idle-timeout", env("BILLING_IDLE_TIMEOUT", "0s"), "how long a fenced transaction may sit idle on the database before the server ends it; 0: the lock's lease (env BILLING_IDLE_TIMEOUT)")
	fs.StringVar(&jobs, "jobs", env("BILLING_JOBS", "0"), "stop after this many jobs; 0 runs until SIGTERM (env BILLING_JOBS)")
	fs.BoolVar(&cfg.noFence, "no-fence", os.Getenv("BILLING_NO_FENCE") != "", "write in a plain transaction without fencing: the lock alone, which loses updates (env BILLING_NO_FENCE)")
	fs.StringVar(&cfg.grant, "grant", env("BILLING_GRANT", "lock"), `what a write presents: "lock" (the lock itself: refused before any I/O once the client knows it is lost, and the job's context ends with the lock) or "token" (only resource and token, as a process that cannot see its lock's state: only the database can refuse it) (env BILLING_GRANT)`)
	fs.StringVar(&seed, "seed", env("BILLING_SEED", "0"), "seed for picking accounts and job durations; 0 picks one (env BILLING_SEED)")
	fs.BoolVar(&cfg.setup, "setup", false, "apply the migrations, create the billing tables and one zero row per account, and exit")
	for _, v := range []struct {
		s    *span
		name string
	}{{&cfg.think, "BILLING_THINK"}, {&cfg.job, "BILLING_JOB"}, {&cfg.commitDelay, "BILLING_COMMIT_DELAY"}} {
		if e := os.Getenv(v.name); e != "" {
			if err := v.s.Set(e); err != nil {
				return cfg, fmt.Errorf("%s: %w", v.name, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.lease, err = time.ParseDuration(lease); err != nil {
		return cfg, fmt.Errorf("-lease %q: %w", lease, err)
	}
	if cfg.timeout, err = time.ParseDuration(timeout); err != nil || cfg.timeout < 0 {
		return cfg, fmt.Errorf("-timeout %q: want a duration >= 0", timeout)
	}
	if cfg.idle, err = time.ParseDuration(idle); err != nil || cfg.idle < 0 {
		return cfg, fmt.Errorf("-idle-timeout %q: want a duration >= 0", idle)
	}
	if cfg.jobs, err = strconv.Atoi(jobs); err != nil || cfg.jobs < 0 {
		return cfg, fmt.Errorf("-jobs %q: want a count >= 0", jobs)
	}
	if cfg.seed, err = strconv.ParseUint(seed, 10, 64); err != nil {
		return cfg, fmt.Errorf("-seed %q: want an unsigned integer", seed)
	}
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	if cfg.accounts, err = parseAccounts(accounts); err != nil {
		return cfg, err
	}
	cfg.etcd = splitList(etcd)
	switch {
	case cfg.id == "":
		return cfg, errors.New("-id is empty")
	case len(cfg.etcd) == 0 && !cfg.setup:
		return cfg, errors.New("-etcd names no endpoint")
	case cfg.dsn == "":
		return cfg, errors.New("-dsn is empty")
	case cfg.grant != "lock" && cfg.grant != "token":
		return cfg, fmt.Errorf(`-grant %q: want "lock" or "token"`, cfg.grant)
	}
	return cfg, nil
}

func parseAccounts(s string) ([]string, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 10000 {
			return nil, fmt.Errorf("-accounts %d: want 1 to 10000 accounts", n)
		}
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("account-%d", i+1)
		}
		return out, nil
	}
	out := splitList(s)
	if len(out) == 0 {
		return nil, errors.New("-accounts names no account")
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// span is a duration or a range of durations ("100ms..400ms") drawn uniformly.
type span struct{ min, max time.Duration }

func (s *span) String() string {
	if s.min == s.max {
		return s.min.String()
	}
	return s.min.String() + ".." + s.max.String()
}

func (s *span) Set(v string) error {
	lo, hi, isRange := strings.Cut(v, "..")
	a, err := time.ParseDuration(lo)
	if err != nil {
		return fmt.Errorf("duration %q: %w", v, err)
	}
	b := a
	if isRange {
		if b, err = time.ParseDuration(hi); err != nil {
			return fmt.Errorf("duration %q: %w", v, err)
		}
	}
	if a < 0 || b < a {
		return fmt.Errorf("duration range %q: want 0 <= min <= max", v)
	}
	s.min, s.max = a, b
	return nil
}
