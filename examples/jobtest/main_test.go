package jobtest_test

import (
	"testing"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/scenario"
)

// postgres is a throwaway PostgreSQL for these tests (your tests: your own server).
var postgres = pgtest.New()

func TestMain(m *testing.M) { scenario.Main(m, func() { postgres.Close() }) }

// gcPause: a takes the lock and freezes inside its fenced transaction (InStore:
// every local check of its lock passed), past its lease; b takes the lock and
// writes; a wakes once b is done and sends its write with its old token.
func gcPause() []*scenario.Step {
	return []*scenario.Step{
		scenario.Start("a"),
		scenario.Freeze("a").When("a", scenario.InStore).Until("b", scenario.Finished),
		scenario.Start("b"),
	}
}
