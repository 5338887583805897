package redistest

import (
	"io"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/testserver"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// TestStart_portTaken takes a port a server is given first before redis-server
// binds it, as another process can: the server starts on other ports.
func TestStart_portTaken(t *testing.T) {
	if _, err := binary("redis-server"); err != nil {
		testserver.Unavailable(t, "redistest: no redis-server", err, hint)
	}
	node := func(t *testing.T) redis.UniversalClient {
		n, err := StartNode(t.Context())
		if err != nil {
			t.Fatalf("StartNode: %v", err)
		}
		t.Cleanup(func() { n.Close() })
		return n.Client(t)
	}
	tests := []struct {
		name    string
		taken   int  // index of the port taken: the server's, then a cluster node's bus port
		byRedis bool // the port is taken by another redis-server, which answers on it
		start   func(t *testing.T) redis.UniversalClient
		tries   int // starts in all: one more than servers
	}{
		{"node, its port", 0, false, node, 2},
		{"node, its port, by another redis-server", 0, true, node, 2},
		{"cluster, a node's bus port", 1, false, func(t *testing.T) redis.UniversalClient {
			c, err := StartCluster(t.Context())
			if err != nil {
				t.Fatalf("StartCluster: %v", err)
			}
			t.Cleanup(func() { c.Close() })
			return c.Client(t)
		}, masters + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if os.Getenv(EnvURL) != "" || os.Getenv(EnvCluster) != "" {
				t.Skip("servers named by " + EnvURL + " or " + EnvCluster + " are not started")
			}
			var other redis.UniversalClient
			if tt.byRedis {
				other = node(t)
			}
			tries := takePort(t, tt.taken, other)
			rdb := tt.start(t)
			if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			if *tries != tt.tries {
				t.Fatalf("%d starts; want %d: one more than servers, for the taken port", *tries, tt.tries)
			}
			if other != nil {
				if n, err := other.Exists(t.Context(), "k").Result(); err != nil || n != 0 {
					t.Fatalf("the other redis-server has k: %d, %v; the node started on it", n, err)
				}
			}
		})
	}
}

// takePort makes the first start find the i-th port it is given taken, as another
// process can take it: by a listener that never answers, or one forwarding every
// connection to the server other talks to. It returns how many starts were made.
func takePort(t *testing.T, i int, other redis.UniversalClient) *int {
	orig := startOnFreePorts
	t.Cleanup(func() { startOnFreePorts = orig })
	tries := new(int)
	startOnFreePorts = func(n int, start func([]int) error) error {
		return orig(n, func(ports []int) error {
			if *tries++; *tries == 1 {
				target := ""
				if other != nil {
					target = other.(*redis.Client).Options().Addr
				}
				l, err := take(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])), target)
				if err != nil {
					t.Errorf("take port %d: %v", ports[i], err)
					return err
				}
				t.Cleanup(func() { l.Close() })
			}
			return start(ports)
		})
	}
	return tries
}

// take takes addr as another process can: with a listener that never answers or,
// when target is set, a proxy forwarding every connection to target.
func take(addr, target string) (io.Closer, error) {
	if target == "" {
		return net.Listen("tcp", addr)
	}
	return delayproxy.New(target, delayproxy.ListenOn(addr))
}
