//go:build unix

package lockclient_test

import "testing"

// TestClient_AcquirePermit_crashFreesSlot kills a permit's holder process: its
// session lease expires, and its slot passes on with a higher token.
func TestClient_AcquirePermit_crashFreesSlot(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	h := startHolder(t, srv, "permit:crawlers:2")
	other := newClient(t, srv.Client(t))
	mine := mustPermit(t, other, "crawlers", 2)
	if mine.Resource() != "crawlers/0001" {
		t.Fatalf("second permit took %q, want crawlers/0001", mine.Resource())
	}
	if _, err := other.TryAcquirePermit(t.Context(), "crawlers", 2); err == nil {
		t.Fatal("a third permit of 2 granted while the holder process runs")
	}
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p := mustPermit(t, other, "crawlers", 2)
	if p.Resource() != "crawlers/0000" || p.Token() <= h.token {
		t.Fatalf("after the crash: %q token %d, want crawlers/0000 above %d", p.Resource(), p.Token(), h.token)
	}
	if isClosed(mine.Done()) {
		t.Fatal("the other holder's permit ended with the crash")
	}
}
