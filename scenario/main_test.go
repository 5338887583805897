package scenario_test

import (
	"testing"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
	"github.com/fencegate/fencegate/scenario"
)

// Throwaway servers, started by the first test that needs one, in the test
// process only (a worker gets its DSN from Config.Setup).
var (
	postgres = pgtest.New()
	mariadb  = mysqltest.New()
)

func TestMain(m *testing.M) {
	scenario.Main(m, func() { postgres.Close() }, func() { mariadb.Close() })
}
