package pgbouncertest

import (
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
)

// TestServer_portTaken takes the port PgBouncer is given first before it binds it,
// as another process can: it starts on another port.
func TestServer_portTaken(t *testing.T) {
	tries := takeFirstPort(t)
	pg := pgtest.New()
	defer pg.Close()
	s := New(pg, 1)
	defer s.Close()
	started := false
	t.Run("database", func(t *testing.T) { // its cleanup drops the database before Close
		dsn := s.DSN(t) // skips where no PgBouncer can be had
		started = true
		conn, err := pgx.Connect(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		if err := conn.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	if !started {
		t.Skip("no PgBouncer started")
	}
	if *tries != 2 {
		t.Fatalf("%d starts; want 2: one on the taken port, one on another", *tries)
	}
}

// takeFirstPort makes the start hold the first port it is given, as another process
// would, and returns how many starts were made.
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
