// Command observability wires fencegate's structured logs (log/slog) and its
// Prometheus metrics (lockclient/lockmetrics) into a program, runs a short
// scenario that produces every kind of event, and prints the metrics it
// exported:
//
//   - three workers take turns on one lock and write under it (grants, waits,
//     releases, accepted fenced writes);
//   - a holder paused past its lock's hand-over writes with its old token and
//     is refused by the database (a stale write, logged with both tokens);
//   - a job that forgets to renew a manual-renewal lock loses it (a loss,
//     logged with its cause).
//
// With no flags it starts a throwaway etcd (lockclient/locktest: an etcd server
// process, built with the go command on first use) and uses a temporary SQLite
// file, so it needs nothing but Go installed:
//
//	go run ./examples/observability                   # scenario, then the metrics
//	go run ./examples/observability -serve :9464      # and keep serving /metrics
//	go run ./examples/observability -etcd 127.0.0.1:2379
//
// Logs go to stderr as JSON; the metrics, scraped from the program's own
// /metrics endpoint, to stdout. The exit status is 0 when the scenario produced
// what it claims (one stale write refused, one loss), 1 otherwise, 2 for bad
// flags.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/lockmetrics"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("observability", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoints := fs.String("etcd", "", "etcd endpoints, comma-separated (default: a throwaway etcd)")
	serve := fs.String("serve", "", "keep serving /metrics on this address after the scenario, until interrupted")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "observability: bad -log-level %q or extra arguments %q\n", *level, fs.Args())
		return 2
	}
	if err := scenario(ctx, *endpoints, *serve, slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl})), stdout); err != nil {
		fmt.Fprintln(stderr, "observability:", err)
		return 1
	}
	return 0
}

func scenario(ctx context.Context, endpoints, serve string, log *slog.Logger, stdout io.Writer) error {
	dir, err := os.MkdirTemp("", "fencegate-observability-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// One registry and one Metrics for the lock client and the store alike.
	reg := prometheus.NewRegistry()
	metrics, err := lockmetrics.New(reg)
	if err != nil {
		return err
	}
	addr := serve
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	eps := strings.Split(endpoints, ",")
	if endpoints == "" {
		etcd, err := locktest.Run(dir)
		if err != nil {
			return err
		}
		defer etcd.Close()
		eps = etcd.Endpoints()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	locks, err := lockclient.New(cli, lockclient.WithTTL(2*time.Second),
		lockclient.WithLogger(log.With("component", "lockclient")), lockclient.WithObserver(metrics))
	if err != nil {
		return err
	}
	defer locks.Close()

	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		return err
	}
	store, err := sqlfence.New(db, migrations.SQLite, sqlfence.WithObserver(metrics))
	if err != nil {
		return err
	}
	credit := func(ctx context.Context, g fence.Grant) error {
		return fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger VALUES ('acct-42', 10) ON CONFLICT (account) DO UPDATE SET balance = balance + 10")
			return err
		})
	}

	// Three workers take turns on one lock.
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			l, err := locks.Acquire(ctx, "acct-42")
			if err != nil {
				errs <- err
				return
			}
			defer l.Release(ctx)
			time.Sleep(50 * time.Millisecond) // the work
			errs <- credit(l.Context(), l)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}

	// A paused holder: its grant is older than the last write.
	old, err := locks.Acquire(ctx, "acct-7")
	if err != nil {
		return err
	}
	paused := fence.NewGrant(old.Resource(), old.Token()) // what the paused process still holds
	if err := old.Release(ctx); err != nil {
		return err
	}
	next, err := locks.Acquire(ctx, "acct-7")
	if err != nil {
		return err
	}
	if err := credit(next.Context(), next); err != nil {
		return err
	}
	next.Release(ctx)
	var stale *fence.StaleError
	if err := credit(ctx, paused); !errors.As(err, &stale) {
		return fmt.Errorf("the paused holder's write: %v, want it refused as stale", err)
	}
	// The refusal comes back to the caller, who logs it with its own context; the
	// metrics count it (fencegate_fenced_writes_total{result="stale"}).
	log.LogAttrs(ctx, slog.LevelWarn, "fenced write refused", slog.String("resource", stale.Resource),
		slog.Int64("token", int64(stale.Presented)), slog.Int64("stored_token", int64(stale.Seen)))

	// A job that forgets to renew its manual-renewal lock.
	forgot, err := locks.Acquire(ctx, "report", lockclient.WithManualRenewal(2*time.Second))
	if err != nil {
		return err
	}
	select {
	case <-forgot.Done():
	case <-ctx.Done():
		return ctx.Err()
	}

	// Scrape our own endpoint, as Prometheus would.
	text, err := scrape(ctx, "http://"+ln.Addr().String()+"/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "fencegate_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(stdout, line)
		}
	}
	for _, want := range []string{
		`fencegate_fenced_writes_total{adapter="sqlfence",result="stale"} 1`,
		`fencegate_lock_losses_total{cause="not_renewed"} 1`,
	} {
		if !strings.Contains(text, want) {
			return fmt.Errorf("metrics lack %s", want)
		}
	}
	if serve != "" {
		fmt.Fprintf(stdout, "serving http://%s/metrics until interrupted\n", ln.Addr())
		<-ctx.Done()
	}
	return nil
}

func scrape(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape /metrics: %s %v", resp.Status, err)
	}
	return string(b), nil
}
