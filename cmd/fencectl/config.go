package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// config is what the flags and the environment say; flags win.
type config struct {
	endpoints string
	prefix    string
	cacert    string
	cert      string
	key       string
	user      string
	password  string
	dsn       string
	timeout   time.Duration
	json      bool
	release   bool
	all       bool
	newMark   bool // fence -new
	exact     bool // watch -exact
}

func defaultConfig() config {
	c := config{
		endpoints: "127.0.0.1:2379",
		prefix:    "/fencegate/locks/", // lockclient's default
		timeout:   5 * time.Second,
	}
	for env, p := range map[string]*string{
		"FENCECTL_ENDPOINTS": &c.endpoints,
		"FENCECTL_PREFIX":    &c.prefix,
		"FENCECTL_USER":      &c.user,
		"FENCECTL_PASSWORD":  &c.password,
		"FENCECTL_DSN":       &c.dsn,
	} {
		if v := os.Getenv(env); v != "" {
			*p = v
		}
	}
	return c
}

// flagSet names the shared flags a command takes; every command takes -timeout.
type flagSet uint

const (
	etcdFlags    flagSet = 1 << iota // -endpoints, -prefix, -cacert, -cert, -key, -user, -password
	dsnFlag                          // -dsn
	jsonFlag                         // -json
	releaseFlag                      // -release (fence)
	fenceAllFlag                     // -all (fence)
	newFlag                          // -new (fence)
	exactFlag                        // -exact (watch)

	allFlags = etcdFlags | dsnFlag | jsonFlag | releaseFlag
)

// flags binds the flags in which to c; the current values are the defaults, so
// flags given before the command carry over to the command's own set.
func (c *config) flags(name string, which flagSet, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	if which&etcdFlags != 0 {
		fs.StringVar(&c.endpoints, "endpoints", c.endpoints, "etcd endpoints, comma-separated [FENCECTL_ENDPOINTS]")
		fs.StringVar(&c.prefix, "prefix", c.prefix, "lock key prefix [FENCECTL_PREFIX]")
		fs.StringVar(&c.cacert, "cacert", c.cacert, "CA bundle to verify etcd's certificate (enables TLS)")
		fs.StringVar(&c.cert, "cert", c.cert, "client certificate for etcd (enables TLS)")
		fs.StringVar(&c.key, "key", c.key, "client certificate's key")
		fs.StringVar(&c.user, "user", c.user, "etcd user [FENCECTL_USER]")
		fs.StringVar(&c.password, "password", c.password, "etcd password [FENCECTL_PASSWORD]")
	}
	if which&dsnFlag != 0 {
		fs.StringVar(&c.dsn, "dsn", c.dsn, "database: postgres://..., a MySQL DSN or a SQLite file [FENCECTL_DSN]")
	}
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "bound on the command's I/O")
	if which&jsonFlag != 0 {
		fs.BoolVar(&c.json, "json", c.json, "print JSON")
	}
	if which&releaseFlag != 0 {
		fs.BoolVar(&c.release, "release", c.release, "fence: also release the lock key, conditioned on the holder's token")
	}
	if which&fenceAllFlag != 0 {
		fs.BoolVar(&c.all, "all", c.all, "every mark stored and every lock held (after promoting a replica that may lag)")
	}
	if which&newFlag != 0 {
		fs.BoolVar(&c.newMark, "new", c.newMark, "fence: store a mark for a RESOURCE that has neither a lock held nor a mark")
	}
	if which&exactFlag != 0 {
		fs.BoolVar(&c.exact, "exact", c.exact, "watch: NAME is one lock's whole name, a trailing * included")
	}
	return fs
}

// etcd returns an etcd client for c; it dials lazily, so an unreachable etcd is
// reported by the first request (see etcdErr).
func (c *config) etcd() (*clientv3.Client, error) {
	var eps []string
	for _, e := range strings.Split(c.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, usageError("no etcd endpoints (-endpoints or FENCECTL_ENDPOINTS)")
	}
	cc := clientv3.Config{
		Endpoints:   eps,
		DialTimeout: c.timeout, // with auth, the dial also logs in: one bound for it all
		Username:    c.user,
		Password:    c.password,
		Logger:      zap.NewNop(),
	}
	if c.user == "" && c.password != "" {
		return nil, usageError("-password without -user")
	}
	if (c.cert == "") != (c.key == "") {
		return nil, usageError("-cert and -key go together")
	}
	if c.cacert != "" || c.cert != "" {
		info := transport.TLSInfo{CertFile: c.cert, KeyFile: c.key, TrustedCAFile: c.cacert}
		tlsCfg, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("TLS configuration: %w", err)
		}
		cc.TLS = tlsCfg
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, c.etcdErr(err)
	}
	return cli, nil
}
