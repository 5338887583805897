package engine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// Settings are the options every SQL adapter's Store takes alike, checked alike.
type Settings struct {
	Idle   time.Duration       // WithIdleTimeout; 0: the grant's lease or DefaultIdleTimeout
	Obs    fence.WriteObserver // WithObserver; nil: none
	KeyTTL time.Duration       // WithKeyTTL; 0: idempotency keys never expire
}

// SetIdleTimeout is WithIdleTimeout: d must be at least a millisecond, the servers' unit.
func (s *Settings) SetIdleTimeout(adapter string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%s: WithIdleTimeout(%v): want at least 1ms: %w", adapter, d, fence.ErrInvalidArgument)
	}
	s.Idle = d
	return nil
}

// SetKeyTTL is WithKeyTTL (see CheckKeyTTL).
func (s *Settings) SetKeyTTL(adapter string, d time.Duration) error {
	if err := CheckKeyTTL(d); err != nil {
		return fmt.Errorf("%s: %w", adapter, err)
	}
	s.KeyTTL = d
	return nil
}

// IdleMS is the idle bound of g's transactions in milliseconds, as text.
func (s *Settings) IdleMS(g fence.Grant) string {
	return strconv.FormatInt(IdleTimeout(g, s.Idle).Milliseconds(), 10)
}

// Observe reports a fenced write's result to the observer, if any; deferred by each
// fenced method.
func (s *Settings) Observe(adapter, op string, errp *error) {
	if s.Obs != nil {
		s.Obs.FencedWrite(adapter, op, *errp)
	}
}
