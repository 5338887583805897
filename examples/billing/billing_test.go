package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

func TestParseConfig_badInput(t *testing.T) {
	tests := []struct {
		args []string
		want string // a piece of the error naming the problem
	}{
		{[]string{"-lease", "soon"}, "-lease"},
		{[]string{"-jobs", "-1"}, "-jobs"},
		{[]string{"-grant", "badge"}, "-grant"},
		{[]string{"-accounts", " , "}, "-accounts"},
		{[]string{"-accounts", "0"}, "-accounts"},
		{[]string{"-think", "5s..1s"}, "range"},
		{[]string{"-job", "fast"}, "duration"},
		{[]string{"-commit-delay", "2s..1s"}, "range"},
		{[]string{"-timeout", "-1s"}, "-timeout"},
		{[]string{"-timeout", "soon"}, "-timeout"},
		{[]string{"-seed", "x"}, "-seed"},
		{[]string{"-dsn", ""}, "-dsn"},
		{[]string{"-etcd", ""}, "-etcd"},
		{[]string{"-id", ""}, "-id"},
		{[]string{"stray"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseConfig(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parseConfig(%q) = %v, want an error naming %q", tt.args, err, tt.want)
			}
		})
	}
	cfg, err := parseConfig([]string{"-accounts", "3", "-think", "1s..2s", "-jobs", "4", "-id", "w9"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.accounts, []string{"account-1", "account-2", "account-3"}) || cfg.think.min.Seconds() != 1 || cfg.think.max.Seconds() != 2 || cfg.jobs != 4 || cfg.id != "w9" {
		t.Fatalf("parseConfig = %+v", cfg)
	}
}

// TestWorkers_sqlite runs three workers in one process against a real etcd and a
// SQLite file: every acknowledged write is stored, in token order, and the balances
// add up.
func TestWorkers_sqlite(t *testing.T) {
	srv := locktest.Start(t)
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "billing.db")
	base := []string{"-etcd", strings.Join(srv.Endpoints(), ","), "-dsn", dsn, "-accounts", "2", "-lease", "2s", "-job", "0s..5ms"}
	cfg, err := parseConfig(append(base, "-setup"))
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	const workers, jobs = 3, 8
	logs := make([]bytes.Buffer, workers)
	var wg sync.WaitGroup
	for i := range workers {
		cfg, err := parseConfig(append(base, "-id", fmt.Sprintf("w%d", i), "-jobs", fmt.Sprint(jobs), "-seed", fmt.Sprint(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := newWorker(cfg, newLog(&logs[i], cfg.id)).run(t.Context()); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
	}
	wg.Wait()

	acked := map[string][]int64{} // account -> acknowledged tokens
	for i := range logs {
		sc := bufio.NewScanner(&logs[i])
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("log line %q: %v", sc.Text(), err)
			}
			switch ev.Event {
			case "commit":
				acked[ev.Account] = append(acked[ev.Account], ev.Token)
			case "refused", "aborted", "unknown", "error":
				t.Errorf("unexpected event without faults: %s", sc.Text())
			}
		}
	}
	db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	total := 0
	for _, account := range []string{"account-1", "account-2"} {
		var balance int64
		var tokens string
		if err := db.QueryRow(`SELECT balance, tokens FROM billing_accounts WHERE account = ?`, account).Scan(&balance, &tokens); err != nil {
			t.Fatal(err)
		}
		want := acked[account]
		slices.Sort(want)
		got := strings.Split(tokens, ",")
		if tokens == "" {
			got = nil
		}
		if int(balance) != len(want) || len(got) != len(want) || strings.Join(got, ",") != joinInts(want) {
			t.Errorf("%s: balance %d, tokens %q; acknowledged tokens %v", account, balance, tokens, want)
		}
		total += int(balance)
	}
	if total != workers*jobs {
		t.Fatalf("balances add up to %d, want %d jobs", total, workers*jobs)
	}
}

func joinInts(ns []int64) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// The log tells an unknown commit outcome from an acknowledged write, a refusal, a
// lost lock and a rollback: the e2e checker accepts either fate only for "unknown".
func TestWorker_outcome(t *testing.T) {
	grant := fence.NewGrant("account-42", 7)
	tests := []struct {
		name      string
		err       error
		wrote     bool
		kind, why string
	}{
		{"acknowledged", nil, true, "commit", ""},
		{"stale", &fence.StaleError{Resource: "account-42", Presented: 7, Seen: 9}, false, "refused", "stale"},
		{"lost", fmt.Errorf("%w: \"account-42\" at token 7", fence.ErrLost), true, "refused", "lost"},
		{"commit unknown", fmt.Errorf("job: %w: commit for %q at token %d: %w", fence.ErrCommitUnknown, grant.Resource(), grant.Token(), io.ErrUnexpectedEOF), true, "unknown", ""},
		{"failed before the writes", context.DeadlineExceeded, false, "aborted", "before its writes"},
		{"failed after the writes", errors.New("commit: serialization failure"), true, "aborted", "after its writes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := newWorker(config{id: "w1"}, newLog(&buf, "w1"))
			ctx, cancel := context.WithCancel(t.Context())
			cancel() // no back-off sleep after a failure
			w.outcome(ctx, "account-42", 7, 3, tt.wrote, tt.err)
			var ev event
			if err := json.Unmarshal(buf.Bytes(), &ev); err != nil {
				t.Fatalf("log %q: %v", buf.String(), err)
			}
			if ev.Event != tt.kind || ev.Reason != tt.why || ev.Token != 7 || ev.Account != "account-42" {
				t.Fatalf("logged %+v, want event %q reason %q", ev, tt.kind, tt.why)
			}
			if tt.kind != "refused" && ev.Value != 3 {
				t.Fatalf("logged value %d, want the balance written, 3", ev.Value)
			}
		})
	}
}
