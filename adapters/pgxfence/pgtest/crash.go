package pgtest

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotStarted is what Crash and Restart return for a Server that started no
	// server of its own: none yet (no DSN call), or it uses the server
	// FENCEGATE_POSTGRES_DSN names, which pgtest does not crash; and what Addr
	// returns before the first DSN call.
	ErrNotStarted = errors.New("pgtest: no server started by this Server")
)

// Addr returns the host:port the server listens on, or ErrNotStarted before the
// first DSN call (or when none could be had).
func (s *Server) Addr() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base == nil {
		return "", ErrNotStarted
	}
	return s.base.Host, nil
}

// Crash kills every process of the server this Server started (SIGKILL), as the
// machine's crash would end them: open connections break, and a transaction not
// yet committed is gone. It returns ErrNotStarted when this Server started none,
// and an error if the server is already down.
func (s *Server) Crash() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return ErrNotStarted
	}
	if s.down {
		return errors.New("pgtest: crash: the server is already down")
	}
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.admin.Close(ctx)
		cancel()
		s.admin = nil
	}
	if err := s.inst.Crash(); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	s.down = true
	return nil
}

// Restart starts the crashed server again on its data and port, and returns once
// it answers (PostgreSQL replays its log first). It returns ErrNotStarted when
// this Server started none, an error if the server is running, and ctx's error or
// the server's log when it does not come back.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return ErrNotStarted
	}
	if !s.down {
		return errors.New("pgtest: restart: the server is running: Crash it first")
	}
	for {
		// A backend of the crashed server may still hold the shared memory for
		// a moment; postgres then exits at once, and the next try starts it.
		err := s.startPostgres()
		if err == nil {
			err = s.connect(s.base, 2*time.Minute)
		}
		if err == nil {
			s.down = false
			return nil
		}
		select {
		case <-s.inst.Exited():
			s.inst.Crash() // reaped: Start may run again
		default:
			s.inst.Crash()
			return fmt.Errorf("pgtest: restart: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: restart: %w (last try: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
