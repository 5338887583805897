package testserver_test

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencegate/fencegate/testserver"
)

// listen binds port on loopback, as a server would.
func listen(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// TestStartOnFreePorts_portTakenFirst takes the first port handed out before the
// "server" binds it, as another process can: the second attempt gets other ports and
// the start succeeds.
func TestStartOnFreePorts_portTakenFirst(t *testing.T) {
	var tried [][]int
	var taken net.Listener
	err := testserver.StartOnFreePorts(2, func(ports []int) error {
		tried = append(tried, ports)
		if taken == nil {
			var err error
			if taken, err = listen(ports[0]); err != nil {
				t.Fatalf("take port %d: %v", ports[0], err)
			}
			t.Cleanup(func() { taken.Close() })
		}
		var ls []net.Listener
		defer func() {
			for _, l := range ls {
				l.Close()
			}
		}()
		for _, p := range ports {
			l, err := listen(p)
			if err != nil {
				return fmt.Errorf("server exited: %w", err)
			}
			ls = append(ls, l)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("StartOnFreePorts: %v", err)
	}
	if len(tried) != 2 {
		t.Fatalf("%d attempts (ports %v); want 2", len(tried), tried)
	}
	for _, ports := range tried {
		if len(ports) != 2 || ports[0] == ports[1] {
			t.Fatalf("ports %v: want 2 distinct ones", ports)
		}
	}
	if slices.Contains(tried[1], tried[0][0]) {
		t.Fatalf("second attempt got the taken port %d again: %v", tried[0][0], tried[1])
	}
}

// TestStartOnFreePorts_failures checks which failures start again on fresh ports: a
// bind conflict as Go reports it or as a server's log does, and nothing else.
func TestStartOnFreePorts_failures(t *testing.T) {
	other := errors.New("initdb: No space left on device")
	tests := []struct {
		name    string
		err     error // what each attempt returns
		retried bool
	}{
		{"go bind error", &net.OpError{Op: "listen", Net: "tcp", Err: syscall.EADDRINUSE}, true},
		{"etcd log", errors.New(`member m0: exited before it was ready: exit status 1
{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:40001: bind: address already in use"}`), true},
		{"postgres log", errors.New(`postgres exited during startup: LOG:  could not bind IPv4 address "127.0.0.1": Address already in use
WARNING:  could not create listen socket for "127.0.0.1"
FATAL:  could not create any TCP/IP sockets`), true},
		{"mariadb log", errors.New(`mariadbd exited during startup: [ERROR] Can't start server: Bind on TCP/IP port. Got error: 98: Address already in use
[ERROR] Do you already have another server running on port: 40001 ?`), true},
		{"redis log", errors.New(`redis-server on port 40001: exited during startup
# Warning: Could not create server TCP listening socket 127.0.0.1:40001: bind: Address already in use
# Failed listening on port 40001 (tcp), aborting.`), true},
		{"other failure", other, false},
		{"other failure naming a port", errors.New("postgres exited during startup: FATAL:  invalid value for parameter \"port\""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := testserver.StartOnFreePorts(1, func([]int) error {
				calls++
				return tt.err
			})
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v; want it to wrap the attempt's %v", err, tt.err)
			}
			want := 1
			if tt.retried {
				want = 5
				if !strings.Contains(err.Error(), "5 times") {
					t.Errorf("error %q does not say how often the ports were taken", err)
				}
			}
			if calls != want {
				t.Fatalf("%d attempts; want %d", calls, want)
			}
		})
	}
}
