package nomain_test

import (
	"context"
	"os"
	"testing"

	"github.com/fencegate/fencegate/scenario"
)

// TestNoMain runs a scenario in a package whose tests have no scenario.Main: it
// must fail. It runs only when the kit's TestRun_noMainHook asks.
func TestNoMain(t *testing.T) {
	if os.Getenv("SCENARIO_TEST_NO_MAIN") == "" {
		t.Skip("run by scenario's TestRun_noMainHook")
	}
	scenario.Run(t, scenario.Config{
		Workers: []string{"a"},
		Job:     func(context.Context, *scenario.Worker) error { return nil },
		Read:    func(context.Context, string) (map[string]string, error) { return nil, nil },
	})
}
