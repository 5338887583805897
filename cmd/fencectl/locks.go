package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
	"github.com/fencegate/fencegate/lockclient"
)

// locks returns a lock client for c; close runs after the command.
func (c *config) locks() (*lockclient.Client, func(), error) {
	cli, err := c.etcd()
	if err != nil {
		return nil, nil, err
	}
	lc, err := lockclient.New(cli, lockclient.WithPrefix(c.prefix))
	if err != nil {
		cli.Close()
		return nil, nil, usageError(err.Error())
	}
	// lc holds no session: it only reads, or releases by token.
	return lc, func() { lc.Close(); cli.Close() }, nil
}

// etcdErr turns the errors of an etcd that cannot be reached or refuses the
// credentials into a sentence naming the cause.
func (c *config) etcdErr(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded, status.Code(err) == codes.Unavailable:
		return fmt.Errorf("cannot reach etcd at %s within %v (is it running, are the endpoints, TLS flags right?): %w", c.endpoints, c.timeout, err)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken):
		return fmt.Errorf("etcd at %s refused the user or password: %w", c.endpoints, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcd user %q: %w", c.user, err) // lockclient names the prefix and the fix
	}
	return fmt.Errorf("etcd at %s: %w", c.endpoints, err)
}

// lockJSON is one lock as -json prints it.
type lockJSON struct {
	Name             string       `json:"name"`
	Token            fence.Token  `json:"token"`
	ClientID         string       `json:"client_id"`
	Host             string       `json:"host"`
	PID              int          `json:"pid"`
	AcquiredAt       time.Time    `json:"acquired_at"`
	LeaseLeftSeconds float64      `json:"lease_left_seconds"`
	Set              []string     `json:"set,omitempty"`       // the names taken with it (AcquireSet)
	Semaphore        string       `json:"semaphore,omitempty"` // a permit's semaphore (AcquirePermit)
	Mark             *int64       `json:"mark,omitempty"`      // -dsn: the stored high-water token, 0 for none
	Diff             *int64       `json:"diff,omitempty"`      // -dsn: token - mark
	State            string       `json:"state,omitempty"`     // -dsn: unwritten, written or fenced
	Waiting          []waiterJSON `json:"waiting,omitempty"`   // show: who waits, in line order
}

// waiterJSON is one caller waiting in a lock's line, with the token it will hold.
type waiterJSON struct {
	Token    fence.Token `json:"token"`
	ClientID string      `json:"client_id"`
	Host     string      `json:"host"`
	PID      int         `json:"pid"`
	Since    time.Time   `json:"since"`
}

// fenceState says what a holder's token against the stored mark means: its
// writes are accepted and it has not written yet (unwritten), the mark is its
// own (written), or the mark is above it and every write of its is refused
// (fenced: a successor wrote, or an operator fenced the resource).
func fenceState(token, mark fence.Token) string {
	switch {
	case token < mark:
		return "fenced"
	case token == mark:
		return "written"
	}
	return "unwritten"
}

// printLocks prints infos; marks (nil without -dsn) adds the stored marks.
func printLocks(out io.Writer, asJSON bool, infos []lockclient.Info, marks map[string]fence.Token) error {
	if asJSON {
		list := make([]lockJSON, len(infos))
		for i, in := range infos {
			list[i] = lockJSON{Name: in.Name, Token: in.Token, ClientID: in.ClientID, Host: in.Host, PID: in.PID,
				AcquiredAt: in.AcquiredAt, LeaseLeftSeconds: in.LeaseLeft.Seconds(), Set: in.Set, Semaphore: in.Semaphore}
			for _, w := range in.Waiting {
				list[i].Waiting = append(list[i].Waiting, waiterJSON{w.Token, w.ClientID, w.Host, w.PID, w.AcquiredAt})
			}
			if marks != nil {
				m, d := int64(marks[in.Name]), int64(in.Token-marks[in.Name])
				list[i].Mark, list[i].Diff, list[i].State = &m, &d, fenceState(in.Token, marks[in.Name])
			}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "NAME\tTOKEN\tHOLDER\tHOST\tPID\tACQUIRED\tLEASE LEFT\tSET\tSEMAPHORE")
	if marks != nil {
		fmt.Fprint(tw, "\tMARK\tDIFF\tSTATE")
	}
	fmt.Fprintln(tw)
	for _, in := range infos {
		set := "-"
		if in.Set != nil {
			set = strings.Join(in.Set, ",")
		}
		sem := "-"
		if in.Semaphore != "" {
			sem = in.Semaphore
		}
		// Names hold no control characters (checkLockName), so they print as they are.
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%v\t%s\t%s", in.Name,
			in.Token, in.ClientID, in.Host, in.PID, in.AcquiredAt.UTC().Format(time.RFC3339), in.LeaseLeft, set, sem)
		if marks != nil {
			m := marks[in.Name]
			fmt.Fprintf(tw, "\t%d\t%+d\t%s", m, in.Token-m, fenceState(in.Token, m))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printWaiting(out, infos)
}

// printWaiting lists, under a lock that show printed, who waits for it in line order.
func printWaiting(out io.Writer, infos []lockclient.Info) error {
	for _, in := range infos {
		if len(in.Waiting) == 0 {
			continue
		}
		fmt.Fprintf(out, "\nwaiting for %s, in line order:\n", in.Name)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOKEN\tWAITER\tHOST\tPID\tSINCE")
		for _, w := range in.Waiting {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", w.Token, w.ClientID, w.Host, w.PID, w.AcquiredAt.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// marks reads the stored mark of each lock's name from -dsn's fence_tokens, one
// query per lock; nil without -dsn.
func (c *config) marks(ctx context.Context, infos []lockclient.Info) (map[string]fence.Token, error) {
	if c.dsn == "" {
		return nil, nil
	}
	driver, db, err := openDSN(ctx, c.dsn, false)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	marks := make(map[string]fence.Token, len(infos))
	for _, in := range infos {
		if marks[in.Name], err = fencemark.Read(ctx, db, dialect(driver), in.Name); err != nil {
			return nil, err
		}
	}
	return marks, nil
}

func cmdList(ctx context.Context, cfg *config, _ []string, out io.Writer) error {
	lc, done, err := cfg.locks()
	if err != nil {
		return err
	}
	defer done()
	infos, err := lc.List(ctx)
	if err != nil {
		return cfg.etcdErr(err)
	}
	if len(infos) == 0 && !cfg.json {
		fmt.Fprintf(out, "no locks held under %q\n", cfg.prefix)
		return nil
	}
	marks, err := cfg.marks(ctx, infos)
	if err != nil {
		return err
	}
	return printLocks(out, cfg.json, infos, marks)
}

// cmdShow prints one lock or permit, or with NAME/* (or the name of a
// semaphore) every permit held of semaphore NAME.
func cmdShow(ctx context.Context, cfg *config, args []string, out io.Writer) error {
	name, sem := args[0], false
	if s, ok := strings.CutSuffix(name, "/*"); ok {
		name, sem = s, true
	}
	if err := checkLockName(name); err != nil || (sem && lockname.Check(name) != nil) {
		return usageError(cmp.Or(err, lockname.Check(name)).Error())
	}
	lc, done, err := cfg.locks()
	if err != nil {
		return err
	}
	defer done()
	var infos []lockclient.Info
	if !sem {
		var info lockclient.Info
		info, err = lc.Holder(ctx, name)
		infos = []lockclient.Info{info}
		sem = errors.Is(err, fence.ErrInvalidArgument) // a semaphore's name: show its permits
	}
	if sem {
		infos, err = permits(ctx, lc, name)
		if err == nil && len(infos) == 0 {
			return fmt.Errorf("no permit of %q held under %q", name, cfg.prefix)
		}
	}
	if errors.Is(err, lockclient.ErrNotHeld) {
		return fmt.Errorf("unknown lock %q: nobody holds it under %q", name, cfg.prefix)
	}
	if err != nil {
		return cfg.etcdErr(err)
	}
	marks, err := cfg.marks(ctx, infos)
	if err != nil {
		return err
	}
	return printLocks(out, cfg.json, infos, marks)
}

// permits lists the holders of the permits of semaphore name.
func permits(ctx context.Context, lc *lockclient.Client, name string) ([]lockclient.Info, error) {
	infos, err := lc.List(ctx)
	return slices.DeleteFunc(infos, func(in lockclient.Info) bool { return in.Semaphore != name }), err
}

func cmdRelease(ctx context.Context, cfg *config, args []string, out io.Writer) error {
	name := args[0]
	if err := checkLockName(name); err != nil {
		return usageError(err.Error())
	}
	tok, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || tok <= 0 {
		return usageError(fmt.Sprintf("token %q is not a positive integer (the holder's token: fencectl show %s)", args[1], name))
	}
	lc, done, err := cfg.locks()
	if err != nil {
		return err
	}
	defer done()
	err = lc.Release(ctx, name, fence.Token(tok))
	var nh *lockclient.NotHeldError
	if errors.As(err, &nh) {
		if nh.Current > 0 {
			return fmt.Errorf("lock %q is held with token %d, not %d: nothing released", name, nh.Current, tok)
		}
		return fmt.Errorf("unknown lock %q: nobody holds it under %q, nothing released", name, cfg.prefix)
	}
	if err != nil {
		return cfg.etcdErr(err)
	}
	fmt.Fprintf(out, "released %q (token %d)\n", name, tok)
	return nil
}

// checkLockName reports why name cannot name a lock or a permit's slot, or nil:
// lockclient's rule. It lets fencectl refuse a bad name before any I/O.
func checkLockName(name string) error { return lockname.CheckLockOrSlot(name) }
