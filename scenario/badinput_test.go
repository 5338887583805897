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
// saying what to do, and neither hang nor panic.
func TestRun_badInput(t *testing.T) {
	for name, c := range badInputCases {
		t.Run(name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBadInputCases$/^"+name+"$", "-test.v")
			cmd.Env = append(os.Environ(), badInputEnv+"=1")
			out, err := cmd.CombinedOutput()
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
