// Command s3report plays the GC-pause timeline on an object store: a nightly report
// job whose lock passes to another holder while it stalls, and which then writes its
// stale report anyway. The report is several objects (a data part per holder, then a
// manifest naming it, written last), fenced with s3fence: the stale holder's
// manifest is refused and readers, who go through the manifest, see only the new
// holder's report. With -no-fence the manifest is a plain PutObject and the stale
// report replaces the new one. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/adapters/s3fence/s3test"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

type config struct {
	endpoint, access, secret, bucket string
	etcd                             []string
	lease                            time.Duration
	noFence                          bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "s3report:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("s3report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var etcd string
	fs.StringVar(&cfg.endpoint, "endpoint", "", "S3 endpoint URL (default: a throwaway versitygw)")
	fs.StringVar(&cfg.access, "access", os.Getenv("AWS_ACCESS_KEY_ID"), "access key for -endpoint")
	fs.StringVar(&cfg.secret, "secret", os.Getenv("AWS_SECRET_ACCESS_KEY"), "secret key for -endpoint")
	fs.StringVar(&cfg.bucket, "bucket", "fencegate-s3report", "bucket (created when missing)")
	fs.StringVar(&etcd, "etcd", "", "comma-separated etcd endpoints (default: an embedded etcd)")
	fs.DurationVar(&cfg.lease, "lease", 2*time.Second, "lock lease, whole seconds, at least 2s")
	fs.BoolVar(&cfg.noFence, "no-fence", false, "write the report with plain PutObjects, to see the stale one land")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if etcd != "" {
		cfg.etcd = strings.Split(etcd, ",")
	}
	if cfg.endpoint != "" && (cfg.access == "" || cfg.secret == "") {
		err := errors.New("-endpoint needs -access and -secret (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
		fmt.Fprintln(stderr, err)
		return cfg, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected arguments %q", fs.Args())
		fmt.Fprintln(stderr, err)
		return cfg, err
	}
	return cfg, nil
}

// run sets up the object store and etcd, plays the timeline and checks that the run
// showed what it claims.
func run(ctx context.Context, cfg config, out io.Writer) error {
	srv := &s3test.Server{Endpoint: cfg.endpoint, AccessKey: cfg.access, SecretKey: cfg.secret}
	where := cfg.endpoint
	if cfg.endpoint == "" {
		started, err := s3test.Start(ctx)
		if err != nil {
			return err
		}
		defer started.Close()
		srv, where = started, "a throwaway versitygw at "+started.Endpoint
	}
	client := srv.Client()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(cfg.bucket)}); err != nil && !strings.Contains(err.Error(), "BucketAlreadyOwnedByYou") {
		return fmt.Errorf("create bucket %s: %w", cfg.bucket, err)
	}
	store, err := s3fence.New(client)
	if err != nil {
		return err
	}
	etcdWhere := strings.Join(cfg.etcd, ",")
	if len(cfg.etcd) == 0 {
		dir, err := os.MkdirTemp("", "s3report-etcd-")
		if err != nil {
			return fmt.Errorf("etcd: data directory: %w", err)
		}
		defer os.RemoveAll(dir)
		e, err := locktest.Run(dir)
		if err != nil {
			return fmt.Errorf("start etcd: %w", err)
		}
		defer e.Close()
		cfg.etcd, etcdWhere = e.Endpoints(), "a local etcd at "+e.Endpoints()[0]
	}
	var holders [2]*lockclient.Client
	for i := range holders {
		cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.etcd, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		defer cli.Close()
		if holders[i], err = lockclient.New(cli, lockclient.WithTTL(cfg.lease), lockclient.WithIdentity(fmt.Sprint("holder ", i+1)), lockclient.WithPrefix("/fencegate/examples/s3report/")); err != nil {
			return err
		}
		defer holders[i].Close()
	}
	mode := "with fencing"
	if cfg.noFence {
		mode = "without fencing (-no-fence)"
	}
	fmt.Fprintf(out, "Nightly report on S3, %s: lease %v, %s, bucket %s on %s.\n\n", mode, cfg.lease, etcdWhere, cfg.bucket, where)
	tl := &timeline{out: out, start: time.Now(), store: store, client: client, bucket: cfg.bucket, lease: cfg.lease, noFence: cfg.noFence}
	res, err := tl.play(ctx, holders[0], holders[1])
	if err != nil {
		return err
	}
	return res.verdict(out, cfg.noFence)
}
