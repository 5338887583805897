package scenario_test

import (
	"testing"

	"github.com/fencegate/fencegate/scenario"
)

func TestMain(m *testing.M) { scenario.Main(m) }
