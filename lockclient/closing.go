package lockclient

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// call derives the context of one public call from ctx and the Client's
// closing context, so that Close cancels every wait and etcd request in flight
// at once. end, deferred with the call's error (or nil), releases the context
// and turns the error of a call that Close cut short into ErrClosed.
func (c *Client) call(ctx context.Context) (context.Context, func(err *error)) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func(err *error) {
		stop()
		if err != nil {
			*err = closedErr(ctx, *err)
		}
		cancel(context.Canceled)
	}
}

// closedErr is err, or ErrClosed when err is ctx's end (or etcd's answer to
// it) and Close ended ctx.
func closedErr(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrClosed) || !errors.Is(context.Cause(ctx), ErrClosed) {
		return err
	}
	if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return ErrClosed
	}
	return err
}

// spawn runs f on a goroutine counted in c.loops, which Close waits for;
// false, running nothing, once the Client is closed.
func (c *Client) spawn(f func()) bool {
	return c.sess.ifOpen(func() {
		c.loops.Add(1)
		go func() {
			defer c.loops.Done()
			f()
		}()
	})
}
