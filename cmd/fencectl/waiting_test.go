package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// TestRun_showWaiting: show lists who waits for a lock, in line order, with
// the token each will hold; -json as "waiting".
func TestRun_showWaiting(t *testing.T) {
	srv := locktest.Start(t)
	t.Setenv("FENCECTL_ENDPOINTS", strings.Join(srv.Endpoints(), ","))
	holder := newLockClient(t, srv, "holder")
	if _, err := holder.Acquire(t.Context(), "payroll"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var want []string // the waiters' tokens, in line order
	for _, id := range []string{"worker-a", "worker-b"} {
		w := newLockClient(t, srv, id)
		go w.Acquire(ctx, "payroll") // waits until the test ends
		for {
			info, err := holder.Holder(t.Context(), "payroll")
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Waiting) == len(want)+1 {
				want = append(want, strconv.FormatInt(int64(info.Waiting[len(want)].Token), 10))
				break
			}
		}
	}
	code, out, errOut := fencectl(t, "show", "payroll")
	_, line, _ := strings.Cut(out, "in line order:\n")
	rows := strings.Split(line, "\n")
	if code != 0 || len(rows) < 3 || !strings.HasPrefix(rows[1], want[0]+" ") || !strings.Contains(rows[1], "worker-a") ||
		!strings.HasPrefix(rows[2], want[1]+" ") || !strings.Contains(rows[2], "worker-b") {
		t.Fatalf("show = %d, %q, %q; want worker-a (token %s) then worker-b waiting", code, out, errOut, want[0])
	}
	code, out, errOut = fencectl(t, "-json", "show", "payroll")
	var got []struct {
		ClientID string `json:"client_id"`
		Waiting  []struct {
			Token    int64  `json:"token"`
			ClientID string `json:"client_id"`
		} `json:"waiting"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 1 || len(got[0].Waiting) != 2 ||
		got[0].Waiting[0].ClientID != "worker-a" || strconv.FormatInt(got[0].Waiting[1].Token, 10) != want[1] {
		t.Fatalf("-json show = %d, %q (%v), %q; want worker-a then worker-b (token %s) waiting", code, out, err, errOut, want[1])
	}
}

func newLockClient(t *testing.T, srv *locktest.Cluster, id string) *lockclient.Client {
	t.Helper()
	lc, err := lockclient.New(srv.Client(t), lockclient.WithIdentity(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc
}
