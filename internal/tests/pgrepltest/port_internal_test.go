package pgrepltest

import (
	"net"
	"strconv"
	"testing"
)

// TestStart_portTaken takes the port the primary is given first before postgres
// binds it, as another process can: the primary starts on another port and the
// standby streams from it.
func TestStart_portTaken(t *testing.T) {
	tries := takeFirstPort(t)
	p := Start(t, Sync)
	if err := p.Primary.exec(t.Context(), "CREATE TABLE t (id int)"); err != nil {
		t.Fatal(err)
	}
	if *tries != 3 {
		t.Fatalf("%d starts; want 3: the primary on the taken port and another, the standby", *tries)
	}
}

// takeFirstPort makes the first start hold the first port it is given, as another
// process would, and returns how many starts were made.
func takeFirstPort(t *testing.T) *int {
	orig := startOnFreePorts
	t.Cleanup(func() { startOnFreePorts = orig })
	tries := new(int)
	startOnFreePorts = func(n int, start func([]int) error) error {
		return orig(n, func(ports []int) error {
			if *tries++; *tries == 1 {
				l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
				if err != nil {
					t.Errorf("take port %d: %v", ports[0], err)
					return err
				}
				t.Cleanup(func() { l.Close() })
			}
			return start(ports)
		})
	}
	return tries
}
