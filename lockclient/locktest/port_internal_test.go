package locktest

import (
	"net"
	"strconv"
	"testing"
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
		name  string
		start func(t *testing.T) *Cluster
		taken int // index of the port taken: peer and client port of each member
	}{
		{"single member, its client port", func(t *testing.T) *Cluster { return Start(t) }, 1},
		{"three members, a peer port", func(t *testing.T) *Cluster { return StartCluster(t, 3) }, 2},
		{"Run, its peer port", run, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tries := takePort(t, tt.taken)
			c := tt.start(t)
			if _, err := c.Client(t).Put(t.Context(), "k", "v"); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if *tries != 2 {
				t.Fatalf("%d starts; want 2: one on the taken port, one on others", *tries)
			}
		})
	}
}

// takePort makes the start hold the i-th port it is given first, as another process
// would, and returns how many starts were made.
func takePort(t *testing.T, i int) *int {
	orig := startOnFreePorts
	t.Cleanup(func() { startOnFreePorts = orig })
	tries := new(int)
	startOnFreePorts = func(n int, start func([]int) error) error {
		return orig(n, func(ports []int) error {
			if *tries++; *tries == 1 {
				l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])))
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
