package testserver

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// portTries is how many sets of ports StartOnFreePorts tries.
const portTries = 5

// StartOnFreePorts calls start with n distinct loopback ports that were free a moment
// ago. When start fails because a port was taken before the server bound it, it
// calls start again with fresh ports, up to 5 times in all; any other failure is
// returned at once. A bind conflict is an error wrapping syscall.EADDRINUSE or one
// whose text says "address already in use", as a server's log does: start should
// stop what it started and put the tail of the server's log in its error.
func StartOnFreePorts(n int, start func(ports []int) error) error {
	var err error
	for try := 1; try <= portTries; try++ {
		var ports []int
		if ports, err = freePorts(n); err != nil {
			return err
		}
		if err = start(ports); err == nil || !portTaken(err) {
			return err
		}
		if try == portTries {
			return fmt.Errorf("ports taken before the server bound them, %d times; the last: %w", portTries, err)
		}
	}
	return err
}

// freePorts returns n distinct loopback ports, each free a moment ago: all are held
// at once, so none is handed out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portTaken reports whether err says a server could not bind its port: Go's error,
// or the text every server here logs (etcd, versitygw: "bind: address already in
// use"; PostgreSQL, PgBouncer, Redis, MariaDB: strerror's "Address already in use").
func portTaken(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) ||
		strings.Contains(strings.ToLower(err.Error()), "address already in use")
}
