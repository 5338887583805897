package redisfence

import (
	"errors"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fence"
)

// Errors of this package. Refusals use fence's: a *fence.StaleError
// (fence.ErrStale) for a lower token than the resource's mark, fence.ErrLost for a
// Watched grant whose lock is lost, fence.ErrNotFound for a key that is absent or
// deleted, fence.ErrCommitUnknown for a write whose reply was lost, and
// fence.ErrInvalidArgument, naming the problem, for bad input, before any I/O.
var (
	// ErrNotReplicated means a write was applied on the primary but fewer replicas
	// than WithWaitReplicas asks acknowledged it within its timeout (WAIT's
	// reply). The write stands on the primary; a failover before the replicas
	// catch up can lose it, mark and data together. It matches
	// fence.ErrNotReplicated, as the SQL adapters' unreplicated commits do.
	ErrNotReplicated = fmt.Errorf("redisfence: write not acknowledged by enough replicas: %w", fence.ErrNotReplicated)
	// ErrBadMark means a resource's mark holds a token that is not a decimal
	// integer (something other than the Store wrote it): the token cannot be
	// compared. A mark key holding another type than a hash fails every write
	// with Redis's WRONGTYPE error, before anything is written.
	ErrBadMark = errors.New("redisfence: unreadable fence mark")
	// ErrCommandTable means the server's command table (COMMAND), which Fenced
	// reads once to learn each command's keys, could not be read: the error says
	// why. Nothing was written; the next Fenced reads the table again.
	ErrCommandTable = errors.New("redisfence: cannot read the server's command table")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: redisfence: %s", fence.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func stale(resource string, presented fence.Token, seen fence.Token) error {
	return &fence.StaleError{Resource: resource, Presented: presented, Seen: seen}
}

// unsent reports whether err says a command never reached the server: the
// context ended before it was sent, or no connection could be made.
func unsent(err error) bool {
	var op *net.OpError
	var ns notSent
	return errors.As(err, &ns) || (errors.As(err, &op) && op.Op == "dial")
}

// serverError reports whether err is a reply from Redis (an error reply), not a
// failure to get one.
func serverError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

func notFound(key string, deleted fence.Token) error {
	if deleted > 0 {
		return fmt.Errorf("%w: redisfence: %s was deleted with token %d", fence.ErrNotFound, key, deleted)
	}
	return fmt.Errorf("%w: redisfence: no key %s", fence.ErrNotFound, key)
}
