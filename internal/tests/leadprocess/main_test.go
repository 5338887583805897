// Package leadprocess_test runs Lead in candidate processes that make fenced
// writes to SQLite, freezing, killing and cutting off their leaders, and lock
// holders doing fenced read-modify-writes under the scenario kit. It is a
// module of its own so that lockclient's users do not pay for the SQLite driver
// its tests need.
package leadprocess_test

import (
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/scenario"
)

// testTTL is the candidates' session TTL: etcd's minimum, so that takeovers
// are quick.
const testTTL = 2 * time.Second

func TestMain(m *testing.M) {
	if spec := os.Getenv(candidateEnv); spec != "" {
		os.Exit(runCandidate(spec))
	}
	scenario.Main(m)
}
