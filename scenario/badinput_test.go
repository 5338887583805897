package scenario_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/scenario"
)

// badInputEnv makes TestBadInputCases run its cases: each must fail, and
// TestRun_badInput runs each in a process of its own to read the failure.
const badInputEnv = "SCENARIO_TEST_BAD_INPUT"

// noopConfig is a scenario whose job only reaches "ready".
func noopConfig() scenario.Config {
	return scenario.Config{
		Workers: []string{"a", "b"},
		Job:     func(ctx context.Context, w *scenario.Worker) error { return w.Reach(ctx, "ready") },
		Read:    func(context.Context, string) (map[string]string, error) { return nil, nil },
	}
}

// storeConfig is noopConfig with the shared PostgreSQL as its StoreServer.
func storeConfig() scenario.Config {
	c := noopConfig()
	c.StoreServer = postgres
	c.Setup = func(t *testing.T) string { return postgres.DSN(t) }
	return c
}

// writeConfig is storeConfig whose job records a write that sends nothing to the
// store (as a job on SQLite does), its DSN built with Worker.StoreDSN if routed.
func writeConfig(routed bool) func() scenario.Config {
	return func() scenario.Config {
		c := storeConfig()
		c.Job = func(ctx context.Context, w *scenario.Worker) error {
			if routed {
				if _, err := w.StoreDSN(w.Data()); err != nil {
					return err
				}
			}
			l, err := w.Acquire(ctx, "job-"+w.Name())
			if err != nil {
				return err
			}
			return w.Write(ctx, l, "1", func(context.Context) error { return nil })
		}
		return c
	}
}

// with returns noopConfig changed by f.
func with(f func(c *scenario.Config)) func() scenario.Config {
	return func() scenario.Config {
		c := noopConfig()
		f(&c)
		return c
	}
}

var badInputCases = map[string]struct {
	cfg   func() scenario.Config
	steps []*scenario.Step
	want  string
}{
	"unknownWorker": {noopConfig, []*scenario.Step{scenario.Freeze("c")},
		`step 1 Freeze("c"): no worker "c" in Config.Workers`},
	"faultWhenFinished": {noopConfig, []*scenario.Step{scenario.Kill("a").When("a", scenario.Finished)},
		"a finished worker cannot be faulted"},
	"faultOnFinished": {noopConfig, []*scenario.Step{scenario.Start("a"), scenario.Start("b").When("a", scenario.Finished), scenario.Freeze("a")},
		`step 3 Freeze("a"): worker a has already finished, so it cannot be faulted`},
	"pointNeverReached": {noopConfig, []*scenario.Step{scenario.Start("a"), scenario.Freeze("a").When("a", "no such point"), scenario.Start("b")},
		`worker a finished without reaching "no such point"`},
	"nilRead": {func() scenario.Config { c := noopConfig(); c.Read = nil; return c }, nil,
		"Config.Read is nil: give a function that reads the final value"},
	"nilStep": {noopConfig, []*scenario.Step{nil}, "step 1 is nil"},
	"afterAndWhen": {noopConfig, []*scenario.Step{scenario.Kill("a").When("a", "ready").After(time.Second)},
		"After and When both say when to act"},
	"jobFails": {func() scenario.Config {
		c := noopConfig()
		c.Job = func(context.Context, *scenario.Worker) error { return errors.New("no database at that DSN") }
		return c
	}, nil, "scenario: worker a: the job failed: no database at that DSN"},
	"crashStoreNoServer": {noopConfig, []*scenario.Step{scenario.CrashStore()},
		"step 1 CrashStore(): Config.StoreServer is nil, so the kit has no store server to crash: set it"},
	"cutOffStoreNoServer": {noopConfig, []*scenario.Step{scenario.CutOffStore("a")},
		`step 1 CutOffStore("a"): Config.StoreServer is nil, so the kit runs no proxy to the store to cut`},
	"crashEtcdNoMember": {with(func(c *scenario.Config) { c.EtcdMembers = 3 }), []*scenario.Step{scenario.CrashEtcd(5)},
		"step 1 CrashEtcd(5): the run's etcd has 3 member(s), numbered 0 to 2"},
	"crashFollowerOneMember": {noopConfig, []*scenario.Step{scenario.CrashEtcdFollower()},
		"step 1 CrashEtcdFollower(): the run's etcd has one member, the leader, and no follower: set Config.EtcdMembers to 3 or 5"},
	"killLeaderExternal": {with(func(c *scenario.Config) { c.EtcdEndpoints = []string{"http://127.0.0.1:2379"} }), []*scenario.Step{scenario.KillEtcdLeader()},
		"KillEtcdLeader: Config.EtcdEndpoints names an etcd the kit did not start, so it cannot crash its members"},
	"etcdMembersEven": {with(func(c *scenario.Config) { c.EtcdMembers = 4 }), nil,
		"Config.EtcdMembers 4: give 1, 3 or 5"},
	"serverName": {with(func(c *scenario.Config) { c.Workers = []string{"a", "etcd"} }), nil,
		`Config.Workers: "etcd" names the timeline of a server`},
	"crashEtcdTwice": {with(func(c *scenario.Config) { c.EtcdMembers = 3 }),
		[]*scenario.Step{scenario.Start("a"), scenario.CrashEtcd(0).When("a", "ready").Until("b", scenario.Finished), scenario.CrashEtcd(0)},
		"step 3 CrashEtcd(0): etcd member 0 is down already"},
	"crashEtcdNoMajority": {noopConfig, []*scenario.Step{scenario.KillEtcdLeader().Until("b", scenario.Finished)},
		`KillEtcdLeader().Until("b", "finished"): it would leave etcd without a majority until b reaches "finished"`},
	"cutOffStoreUnknown": {storeConfig, []*scenario.Step{scenario.CutOffStore("c")},
		`step 1 CutOffStore("c"): no worker "c" in Config.Workers`},
	"cutOffStoreFinished": {storeConfig, []*scenario.Step{scenario.Start("a"), scenario.Start("b").When("a", scenario.Finished), scenario.CutOffStore("a")},
		`step 3 CutOffStore("a"): worker a has already finished, so it cannot be faulted`},
	"cutOffStoreUnrouted": {storeConfig, []*scenario.Step{scenario.CutOffStore("a").When("a", "ready")},
		`CutOffStore("a") cut nothing: worker a never connected through its proxy to the store: build its DSN with Worker.StoreDSN`},
	"onTheWireNoServer": {noopConfig, []*scenario.Step{scenario.Freeze("a").When("a", scenario.OnTheWire)},
		`step 1 Freeze("a").When("a", "on the wire"): OnTheWire needs the worker's statements to pass the kit's proxy to the store: set Config.StoreServer`},
	"onTheWireUntil": {storeConfig, []*scenario.Step{scenario.Freeze("a").When("a", "ready").Until("b", scenario.OnTheWire)},
		"OnTheWire is a When point only"},
	"onTheWireUnrouted": {writeConfig(false), []*scenario.Step{scenario.Freeze("a").When("a", scenario.OnTheWire)},
		`worker a began a write, but its statements do not pass the kit's proxy to the store: build its DSN with Worker.StoreDSN`},
	"onTheWireNoStatement": {writeConfig(true), []*scenario.Step{scenario.Start("a"), scenario.Freeze("a").When("a", scenario.OnTheWire), scenario.Start("b")},
		"worker a finished without sending a statement through its store proxy during a recorded write"},
	"reachOnTheWire": {with(func(c *scenario.Config) {
		c.Job = func(ctx context.Context, w *scenario.Worker) error { return w.Reach(ctx, scenario.OnTheWire) }
	}), nil, "the job failed: fence: invalid argument: scenario: Reach(OnTheWire): the kit reaches it"},
	"permitsBelowOne": {with(func(c *scenario.Config) {
		c.Job = func(ctx context.Context, w *scenario.Worker) error {
			_, err := w.AcquirePermit(ctx, "exports", 0)
			return err
		}
	}), nil, `the job failed: fence: invalid argument: scenario: AcquirePermit("exports", 0): n is how many permits the semaphore has: give 1 or more`},
	"storeDSNNoServer": {with(func(c *scenario.Config) {
		c.Job = func(ctx context.Context, w *scenario.Worker) error { _, err := w.StoreDSN(w.Data()); return err }
	}), nil, "the job failed: fence: invalid argument: scenario: StoreDSN: Config.StoreServer is nil"},
}

func TestBadInputCases(t *testing.T) {
	if os.Getenv(badInputEnv) == "" {
		t.Skip("run by TestRun_badInput")
	}
	for name, c := range badInputCases {
		t.Run(name, func(t *testing.T) {
			scenario.Run(t, c.cfg(), c.steps...)
		})
	}
}

// TestRun_badInput runs each bad input in a test process of its own: it must fail,
// saying what to do, and neither hang nor panic. The processes mostly wait on
// their etcd and workers, so a few run at once.
func TestRun_badInput(t *testing.T) {
	type result struct {
		out []byte
		err error
	}
	outs := map[string]chan result{}
	slots := make(chan struct{}, 4)
	for name := range badInputCases {
		ch := make(chan result, 1)
		outs[name] = ch
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBadInputCases$/^"+name+"$", "-test.v")
			cmd.Env = append(os.Environ(), badInputEnv+"=1")
			out, err := cmd.CombinedOutput()
			ch <- result{out, err}
		}()
	}
	for name, c := range badInputCases {
		t.Run(name, func(t *testing.T) {
			r := <-outs[name]
			out, err := r.out, r.err
			if err == nil || !strings.Contains(string(out), "--- FAIL: TestBadInputCases/"+name) {
				t.Fatalf("bad input %s did not fail the test (%v):\n%s", name, err, out)
			}
			if !strings.Contains(string(out), c.want) || strings.Contains(string(out), "panic:") {
				t.Fatalf("bad input %s: the failure does not say %q, or panics:\n%s", name, c.want, out)
			}
		})
	}
}

// TestRun_noMainHook runs a scenario in a test package without scenario.Main
// (internal/nomain): the test fails, saying what to add to TestMain.
func TestRun_noMainHook(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", "-run=^TestNoMain$", "./internal/nomain")
	cmd.Env = append(os.Environ(), "SCENARIO_TEST_NO_MAIN=1")
	out, err := cmd.CombinedOutput()
	want := "func TestMain(m *testing.M) { scenario.Main(m) }"
	if err == nil || !strings.Contains(string(out), "--- FAIL: TestNoMain") || !strings.Contains(string(out), want) {
		t.Fatalf("a scenario without scenario.Main did not fail saying %q (%v):\n%s", want, err, out)
	}
}
