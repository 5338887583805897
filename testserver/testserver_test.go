package testserver_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencegate/fencegate/testserver"
)

func TestFreePort_bindable(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d from FreePort cannot be bound: %v", port, err)
	}
	l.Close()
}

func TestTail(t *testing.T) {
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprint("line ", i))
	}
	tests := []struct {
		name, in, want string
	}{
		{"short", "a\nb\n", "a\nb"},
		{"long", strings.Join(lines, "\n"), strings.Join(lines[5:], "\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testserver.Tail(tt.in); got != tt.want {
				t.Fatalf("Tail = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInstance_Stop(t *testing.T) {
	in, err := testserver.NewInstance("sleep", "fgts", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if in.Exited() != nil {
		t.Fatal("Exited is not nil before Start")
	}
	if err := in.Start(exec.Command("sleep", "600")); err != nil {
		t.Fatal(err)
	}
	if err := in.Start(exec.Command("sleep", "600")); err == nil {
		t.Fatal("a second Start succeeded")
	}
	if err := in.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.Exited():
	default:
		t.Fatal("Exited is open after Stop returned")
	}
	if _, err := os.Stat(in.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("directory %s after Stop: %v", in.Dir, err)
	}
}
