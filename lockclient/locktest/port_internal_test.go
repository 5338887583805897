package locktest

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"testing"

	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// TestStartCluster_portTaken takes one of the ports the members are given first
// before etcd binds it, as another process can: the cluster starts on other ports.
func TestStartCluster_portTaken(t *testing.T) {
	run := func(t *testing.T) *Cluster {
		c, err := Run(t.TempDir())
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Cleanup(c.Close)
		return c
	}
	tests := []struct {
		name   string
		start  func(t *testing.T) *Cluster
		taken  int  // index of the port taken: peer and client port of each member
		byEtcd bool // the port is taken by another etcd, which answers on it
	}{
		{"single member, its client port", func(t *testing.T) *Cluster { return Start(t) }, 1, false},
		{"single member, its client port, by another etcd", func(t *testing.T) *Cluster { return Start(t) }, 1, true},
		{"three members, a peer port", func(t *testing.T) *Cluster { return StartCluster(t, 3) }, 2, false},
		{"Run, its peer port", run, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var other string
			if tt.byEtcd {
				other = Start(t).Endpoints()[0]
			}
			tries := takePort(t, tt.taken, other)
			c := tt.start(t)
			if _, err := c.Client(t).Put(t.Context(), "k", "v"); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if *tries != 2 {
				t.Fatalf("%d starts; want 2: one on the taken port, one on others", *tries)
			}
			if other != "" {
				resp, err := newClient(t, []string{other}, "other").Get(t.Context(), "k")
				if err != nil || len(resp.Kvs) != 0 {
					t.Fatalf("the other etcd has k: %v, %v; the cluster started on it", resp, err)
				}
			}
		})
	}
}

// takePort makes the first start find the i-th port it is given taken, as another
// process can take it: by a listener that never answers, or one forwarding every
// connection to the server at url other. It returns how many starts were made.
func takePort(t *testing.T, i int, other string) *int {
	orig := startOnFreePorts
	t.Cleanup(func() { startOnFreePorts = orig })
	tries := new(int)
	startOnFreePorts = func(n int, start func([]int) error) error {
		return orig(n, func(ports []int) error {
			if *tries++; *tries == 1 {
				target := ""
				if other != "" {
					u, _ := url.Parse(other)
					target = u.Host
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
