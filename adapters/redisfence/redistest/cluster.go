package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/testserver"
)

// masters is how many masters a Cluster has: the fewest redis-cli accepts.
const masters = 3

// Cluster is a Redis Cluster of three masters covering all 16384 slots, no
// replicas: redis-server processes this package started (StartCluster or the first
// Client of a zero Cluster), or the nodes FENCEGATE_REDIS_CLUSTER names. It is safe
// for concurrent use; do not copy it.
type Cluster struct {
	// Addrs are the nodes' host:port, set once StartCluster or the first Client has
	// returned.
	Addrs []string

	mu    sync.Mutex
	tried bool
	err   error
	procs []*process
}

// StartCluster starts three cluster-enabled redis-servers, assigns them every slot
// and returns once the cluster reports itself ok on every node. Close stops them.
func StartCluster(ctx context.Context) (*Cluster, error) {
	c := &Cluster{tried: true}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	if env := os.Getenv(EnvCluster); env != "" {
		c.Addrs = strings.Split(env, ",")
		return nil
	}
	cli, err := binary("redis-cli")
	if err != nil {
		return err
	}
	for range masters {
		p, err := newProcess("", true, "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err == nil {
			c.procs = append(c.procs, p)
			err = p.start(ctx)
		}
		if err != nil {
			c.remove()
			return err
		}
		c.Addrs = append(c.Addrs, p.addr())
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	out, err := exec.CommandContext(ctx, cli, append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		c.remove()
		return fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, testserver.Tail(string(out)))
	}
	if err := c.waitOK(ctx); err != nil {
		c.remove()
		return err
	}
	return nil
}

// waitOK waits until every node says cluster_state:ok and knows all the others.
func (c *Cluster) waitOK(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		ok := true
		for _, addr := range c.Addrs {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			info, err := rdb.ClusterInfo(ctx).Result()
			rdb.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.Addrs))) {
				ok = false
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("redistest: cluster not ok after " + startTimeout.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) remove() error {
	var errs []error
	for _, p := range c.procs {
		errs = append(errs, p.remove())
	}
	c.procs = nil
	return errors.Join(errs...)
}

// Options returns cluster client options for the nodes, or skips t (fails it
// where CI is set) when no cluster can be had. A zero Cluster starts on the first
// call.
func (c *Cluster) Options(t testing.TB) *redis.ClusterOptions {
	t.Helper()
	c.mu.Lock()
	if !c.tried {
		c.tried = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c.err = c.start(ctx)
		cancel()
	}
	err := c.err
	c.mu.Unlock()
	if err != nil {
		testserver.Unavailable(t, "redistest: no Redis Cluster", err, "install Debian's redis-server (it brings redis-cli), or set "+EnvCluster)
	}
	return &redis.ClusterOptions{Addrs: append([]string(nil), c.Addrs...), PoolSize: 64}
}

// Client returns a cluster client of the nodes, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(c.Options(t))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Close stops the servers this package started, if any, and removes their data.
// It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.remove()
}
