package lockmetrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// TestMetrics_maxHold: a lock (and a permit) ended by WithMaxHold is a loss
// counted under its own cause.
func TestMetrics_maxHold(t *testing.T) {
	srv := locktest.Start(t)
	m, reg := newMetrics(t)
	c := newClient(t, srv, lockclient.WithObserver(m))
	l, err := c.Acquire(t.Context(), "capped", lockclient.WithMaxHold(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.AcquirePermit(t.Context(), "pool", 2, lockclient.WithMaxHold(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	<-p.Done()
	want := `
# HELP fencegate_lock_losses_total Locks lost by cause: lease_expired (session lease ran out), not_renewed (manual renewal missed), key_deleted (key deleted by someone else), max_hold (WithMaxHold reached).
# TYPE fencegate_lock_losses_total counter
fencegate_lock_losses_total{cause="key_deleted"} 0
fencegate_lock_losses_total{cause="lease_expired"} 0
fencegate_lock_losses_total{cause="max_hold"} 2
fencegate_lock_losses_total{cause="not_renewed"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fencegate_lock_losses_total"); err != nil {
		t.Error(err)
	}
}
