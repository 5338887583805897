package scenario

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
)

// Config is a scenario: its workers, their job, and how to read the final state.
type Config struct {
	// Workers names the worker processes, such as "a" and "b".
	Workers []string
	// Setup runs once, in the test process, before any worker starts (create the
	// schema there); what it returns reaches every worker as Worker.Data and Read.
	Setup func(t *testing.T) string
	// Job is the user's job, run once in each worker process. An error other than
	// fence.ErrStale, fence.ErrLost or a cancellation once one of the worker's
	// locks ended fails the test.
	Job func(ctx context.Context, w *Worker) error
	// Read returns the final value of every resource written, after all workers
	// have ended, in the value Worker.Write recorded.
	Read func(ctx context.Context, data string) (map[string]string, error)
	// TTL is the workers' session lease (default 2 s; at least lockclient.MinTTL, 1 s,
	// which the kit's etcd grants): how long a frozen or cut-off worker keeps its locks.
	TTL time.Duration
	// Launcher starts the workers (default: child processes of the test).
	Launcher Launcher
	// EtcdMembers is the size of the etcd cluster the kit starts for the run: 1
	// (the default), 3 or 5 real etcd processes (locktest), whose members
	// CrashEtcd and KillEtcdLeader break.
	EtcdMembers int
	// EtcdEndpoints, if set, is an etcd the test runs itself (plain, no TLS): the
	// kit starts none, and cannot crash its members.
	EtcdEndpoints []string
	// StoreServer is the database server Setup takes the workers' DSN from, for
	// CrashStore, CutOffStore and OnTheWire (a *pgtest.Server is one). Nil: the
	// kit breaks no store and holds no write in flight.
	StoreServer StoreServer
}

// Main runs the package's tests and then each of after (stop shared servers
// there); a worker process runs only its scenario's job. Call it from TestMain:
//
//	func TestMain(m *testing.M) { scenario.Main(m) }
func Main(m *testing.M, after ...func()) {
	// The process's own pid, so a child process (which inherits the variable) is
	// not taken for hooked.
	os.Setenv(mainEnv, strconv.Itoa(os.Getpid()))
	code := m.Run()
	for _, f := range after {
		f()
	}
	if spec := os.Getenv(workerEnv); spec != "" {
		name, _, _ := strings.Cut(spec, " ")
		fmt.Fprintf(os.Stderr, "scenario: worker %s: the test ended (exit %d) before calling scenario.Run: code before Run runs in workers too; move it into Config.Setup\n", name, code)
		os.Exit(3)
	}
	os.Exit(code)
}

// IsWorker reports whether this process is a worker of a run, for code before Run
// that must not run in workers (a Launcher's setup, a server's start).
func IsWorker() bool { return os.Getenv(workerEnv) != "" }

// Run runs the scenario and fails t when its history breaks the fencing guarantee
// (History.Check), with every worker's timeline. It returns the history. Run one
// scenario per test (a subtest each): a worker runs the first its test reaches.
func Run(t *testing.T, cfg Config, steps ...*Step) *History {
	t.Helper()
	h := Record(t, cfg, steps...)
	if err := h.Check(); err != nil {
		t.Error(err)
	}
	return h
}

// Record runs the scenario and returns its history without checking it, for a
// test that expects a violation. Bad input (no Main hook, an unknown worker, a
// fault on a finished worker, a nil Job or Read) fails t, saying what to do.
func Record(t *testing.T, cfg Config, steps ...*Step) *History {
	t.Helper()
	if spec := os.Getenv(workerEnv); spec != "" {
		if cfg.Job == nil {
			os.Exit(3)
		}
		runWorker(t, cfg, spec)
	}
	if err := validate(cfg, steps); err != nil {
		t.Fatal(err)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 2 * time.Second // the lease the fault costs in the package doc were measured at
	}
	if cfg.Launcher == nil {
		cfg.Launcher = processes{}
	}
	r, err := newRun(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	r.wired = slices.ContainsFunc(steps, func(s *Step) bool { return s.when != nil && s.when.name == OnTheWire })
	if cfg.Setup != nil {
		r.data = cfg.Setup(t)
	}
	if !hasStart(steps) {
		for _, w := range cfg.Workers {
			steps = append([]*Step{Start(w)}, steps...)
		}
	}
	r.setPending(steps)
	for i, s := range steps {
		if err := r.step(i, s); err != nil {
			r.fail(err)
		}
		r.setPending(steps[i+1:])
	}
	return r.finish()
}

func validate(cfg Config, steps []*Step) error {
	if os.Getenv(mainEnv) != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("scenario: the test binary has no scenario.Main hook, so workers cannot run: add\n\tfunc TestMain(m *testing.M) { scenario.Main(m) }\nto this package's tests")
	}
	switch {
	case cfg.Job == nil:
		return fmt.Errorf("scenario: Config.Job is nil: give the job each worker runs")
	case cfg.Read == nil:
		return fmt.Errorf("scenario: Config.Read is nil: give a function that reads the final value of each resource, so the history can be checked")
	case len(cfg.Workers) == 0:
		return fmt.Errorf("scenario: Config.Workers is empty: name at least one worker")
	}
	switch {
	case cfg.EtcdMembers != 0 && cfg.EtcdMembers != 1 && cfg.EtcdMembers != 3 && cfg.EtcdMembers != 5:
		return fmt.Errorf("scenario: Config.EtcdMembers %d: give 1, 3 or 5 (an even count survives no more crashes than one member fewer)", cfg.EtcdMembers)
	case cfg.EtcdMembers != 0 && len(cfg.EtcdEndpoints) > 0:
		return fmt.Errorf("scenario: Config.EtcdMembers and Config.EtcdEndpoints both say which etcd to use: give one")
	}
	if cfg.TTL != 0 && (cfg.TTL < lockclient.MinTTL || cfg.TTL%time.Second != 0) {
		return fmt.Errorf("scenario: Config.TTL %v: a whole number of seconds, at least %v", cfg.TTL, lockclient.MinTTL)
	}
	known := map[string]bool{}
	for _, w := range cfg.Workers {
		if !validName(w) || known[w] {
			return fmt.Errorf("scenario: Config.Workers: %q is empty, repeated or not letters, digits, '-' and '_'", w)
		}
		if w == etcdTimeline || w == storeTimeline {
			return fmt.Errorf("scenario: Config.Workers: %q names the timeline of a server in Events: call the worker something else", w)
		}
		known[w] = true
	}
	for i, s := range steps {
		if err := s.check(i, cfg, known); err != nil {
			return err
		}
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return false
		}
	}
	return true
}

func hasStart(steps []*Step) bool {
	for _, s := range steps {
		if _, ok := s.fault.(start); ok {
			return true
		}
	}
	return false
}

// runPattern is the -test.run pattern that matches exactly the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
