package jobtest_test

import (
	"testing"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/scenario"
)

// postgres is a throwaway PostgreSQL for these tests (your tests: your own server).
var postgres = pgtest.New()

func TestMain(m *testing.M) { scenario.Main(m, func() { postgres.Close() }) }

// gcPause: a takes the lock and freezes at point, past its lease; b takes the
// lock and writes; a wakes once b is done. On PostgreSQL the point is
// scenario.OnTheWire: a's statement has left its process (the kit's proxy holds
// it) and reaches the store after b's write, whatever a does with contexts when
// it wakes. SQLite has no network hop: there the point is scenario.InStore, inside
// a's fenced transaction once every local check of its lock has passed.
func gcPause(point string) []*scenario.Step {
	return []*scenario.Step{
		scenario.Start("a"),
		scenario.Freeze("a").When("a", point).Until("b", scenario.Finished),
		scenario.Start("b"),
	}
}
