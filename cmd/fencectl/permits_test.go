package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// TestRun_permits: list, show and release see a semaphore's permits and their
// holders; watch 'NAME/*' follows them.
func TestRun_permits(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	t.Setenv("FENCECTL_ENDPOINTS", eps)
	lc, err := lockclient.New(srv.Client(t), lockclient.WithIdentity("crawler-3"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wout, weo syncBuffer
	res := fencectlAsync(ctx, &wout, &weo, "-endpoints", eps, "watch", "crawl/*")
	var ps []*lockclient.Lock
	for range 2 {
		p, err := lc.AcquirePermit(t.Context(), "crawl", 3)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	tok1 := strconv.FormatInt(int64(ps[1].Token()), 10)
	tests := []struct {
		name string
		args []string
		code int
		out  []string // substrings of stdout
		not  []string
		err  string // a substring of stderr
	}{
		{"list", []string{"list"}, 0, []string{"crawl/0000", "crawl/0001", "crawler-3", "SEMAPHORE"}, []string{"crawl  "}, ""},
		{"show star", []string{"show", "crawl/*"}, 0, []string{"crawl/0000", "crawl/0001 ", tok1}, nil, ""},
		{"show semaphore", []string{"show", "crawl"}, 0, []string{"crawl/0000", "crawl/0001"}, nil, ""},
		{"show slot", []string{"show", "crawl/0001"}, 0, []string{"crawl/0001", tok1}, []string{"crawl/0000"}, ""},
		{"show json", []string{"-json", "show", "crawl/0001"}, 0, []string{`"semaphore": "crawl"`}, nil, ""},
		{"show free semaphore", []string{"show", "idle/*"}, 1, nil, nil, `no permit of "idle"`},
		{"show bad slot", []string{"show", "crawl/1"}, 2, nil, nil, "slash"},
		{"release slot", []string{"release", "crawl/0001", tok1}, 0, []string{`released "crawl/0001"`}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := fencectl(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.err) {
				t.Fatalf("status %d, stderr %q; want %d and %q", code, errOut, tt.code, tt.err)
			}
			for _, s := range tt.out {
				if !strings.Contains(out, s) {
					t.Errorf("output %q lacks %q", out, s)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(out, s) {
					t.Errorf("output %q has %q", out, s)
				}
			}
		})
	}
	if err := ps[1].Renew(t.Context()); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("Renew of the permit fencectl released = %v, want fence.ErrLost", err)
	}
	want := "released crawl/0001 rev="
	for !strings.Contains(wout.String(), want) { // go test's -timeout ends a broken build
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(wout.String(), "taken    crawl/0000") {
		t.Fatalf("watch printed %q, want the grant of crawl/0000", wout.String())
	}
	cancel()
	if code := waitStatus(t, res, &weo); code != 0 {
		t.Fatalf("watch status %d after interrupt; stderr %q", code, weo.String())
	}
}
