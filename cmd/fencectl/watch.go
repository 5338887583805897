package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// watchJSON is one event as -json prints it, a line each.
type watchJSON struct {
	Time     time.Time   `json:"time"`
	Event    string      `json:"event"` // taken, released, expired, free
	Name     string      `json:"name"`
	Token    fence.Token `json:"token,omitempty"`
	ClientID string      `json:"client_id,omitempty"`
	Host     string      `json:"host,omitempty"`
	PID      int         `json:"pid,omitempty"`
	Value    string      `json:"value,omitempty"`
	Revision int64       `json:"revision"`
	Initial  bool        `json:"initial,omitempty"`
	Reread   bool        `json:"reread,omitempty"`
}

// cmdWatch prints every change of NAME's holder as it happens, until
// interrupted: the state first, then each grant and each end of a hold. With a
// trailing "*" (quoted: 'sched-*') it watches every lock whose name starts with
// what precedes it; -exact watches the lock named NAME, a trailing "*" included.
func cmdWatch(ctx context.Context, cfg *config, args []string, out io.Writer) error {
	name, prefix := args[0], false
	if n := len(name); n > 0 && name[n-1] == '*' && !cfg.exact {
		name, prefix = name[:n-1], true
	}
	if name != "" || !prefix {
		// NAME/* watches the permits of semaphore NAME.
		if err := checkLockName(strings.TrimSuffix(name, "/")); err != nil {
			return usageError(err.Error())
		}
	}
	lc, done, err := cfg.locks()
	if err != nil {
		return err
	}
	defer done()
	var ch <-chan lockclient.Event
	if prefix {
		ch, err = lc.WatchPrefix(ctx, name)
	} else {
		ch, err = lc.Watch(ctx, name)
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	for ev := range ch {
		if cfg.json {
			enc.Encode(watchJSON{Time: time.Now().UTC(), Event: ev.Type.String(), Name: ev.Name, Token: ev.Holder.Token,
				ClientID: ev.Holder.ClientID, Host: ev.Holder.Host, PID: ev.Holder.PID, Value: string(ev.Holder.Value),
				Revision: ev.Revision, Initial: ev.Initial, Reread: ev.Reread})
			continue
		}
		fmt.Fprintln(out, watchLine(ev))
	}
	return nil // ctx ended: interrupted
}

// watchLine is one event as a line of text.
func watchLine(ev lockclient.Event) string {
	s := fmt.Sprintf("%s %-8s %s rev=%d", time.Now().UTC().Format("15:04:05.000"), ev.Type, ev.Name, ev.Revision)
	if ev.Type != lockclient.EventFree {
		h := ev.Holder
		s += fmt.Sprintf(" token=%d holder=%s host=%s pid=%d", h.Token, h.ClientID, h.Host, h.PID)
		if h.Value != nil {
			s += " value=" + strconv.Quote(string(h.Value))
		}
	}
	switch {
	case ev.Initial:
		s += " (current)"
	case ev.Reread:
		s += " (re-read: etcd's history since the last event was compacted)"
	}
	return s
}
