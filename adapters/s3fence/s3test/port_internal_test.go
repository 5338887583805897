package s3test

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// TestStart_portTaken takes the port the server is given first before versitygw
// binds it, as another process can: the server starts on another port.
func TestStart_portTaken(t *testing.T) {
	for _, byGateway := range []bool{false, true} {
		name := map[bool]string{false: "by a listener", true: "by another versitygw"}[byGateway]
		t.Run(name, func(t *testing.T) {
			var other string // host:port of the server that took the port, if one did
			if byGateway {
				o, err := Start(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer o.Close()
				other = strings.TrimPrefix(o.Endpoint, "http://")
			}
			tries := takeFirstPort(t, other)
			var srv Server
			t.Cleanup(func() { srv.Close() })
			c, _ := srv.Bucket(t)
			if _, err := c.ListBuckets(t.Context(), &s3.ListBucketsInput{}); err != nil {
				t.Fatal(err)
			}
			if *tries != 2 {
				t.Fatalf("%d starts; want 2: one on the taken port, one on another", *tries)
			}
		})
	}
}

// takeFirstPort makes the first start find the first port it is given taken, as
// another process can take it: by a listener that never answers, or one forwarding
// every connection to the server at address other. It returns how many starts were
// made.
func takeFirstPort(t *testing.T, other string) *int {
	orig := startOnFreePorts
	t.Cleanup(func() { startOnFreePorts = orig })
	tries := new(int)
	startOnFreePorts = func(n int, start func([]int) error) error {
		return orig(n, func(ports []int) error {
			if *tries++; *tries == 1 {
				target := other
				l, err := take(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), target)
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

// take takes addr as another process can: with a listener that never answers or,
// when target is set, a proxy forwarding every connection to target.
func take(addr, target string) (io.Closer, error) {
	if target == "" {
		return net.Listen("tcp", addr)
	}
	return delayproxy.New(target, delayproxy.ListenOn(addr))
}
