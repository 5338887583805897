package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// fenceJSON is one fenced resource as -json prints it.
type fenceJSON struct {
	Resource    string      `json:"resource"`
	Before      fence.Token `json:"mark_before"` // 0: none stored
	After       fence.Token `json:"mark_after"`
	HolderToken fence.Token `json:"holder_token,omitempty"` // 0: nobody held the lock
	Set         []string    `json:"set,omitempty"`          // the holder's set, when it holds one
	Released    bool        `json:"released"`
}

// cmdFence is the operator's fence: for each resource, raise the stored mark to
// etcd's next token, so every holder granted so far is refused at once; with
// -release, also delete the lock key, conditioned on the holder's token.
func cmdFence(ctx context.Context, cfg *config, args []string, out io.Writer) error {
	if cfg.all && len(args) > 0 {
		return usageError("-all fences every resource: name none")
	}
	for _, r := range args {
		if err := fence.CheckResource(r); err != nil {
			return usageError(err.Error())
		}
		if err := checkLockName(r); cfg.release && err != nil {
			return usageError(err.Error() + " (-release needs a lock name)")
		}
	}
	driver, db, err := openDSN(ctx, cfg.dsn, true)
	if err != nil {
		return err
	}
	defer db.Close()
	lc, done, err := cfg.locks()
	if err != nil {
		return err
	}
	defer done()
	if cfg.all {
		if args, err = fenceAll(ctx, cfg, lc, db, driver, out); err != nil {
			return err
		}
	} else if !cfg.newMark {
		if err := refuseUnknown(ctx, cfg, lc, db, driver, args); err != nil {
			return err
		}
	}
	var results []fenceJSON
	for _, r := range args {
		res, err := fenceOne(ctx, cfg, lc, db, driver, r)
		if err != nil {
			return err
		}
		results = append(results, res)
		if !cfg.json {
			printFence(out, res)
		}
	}
	if cfg.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return nil
}

// refuseUnknown refuses, before any mark is raised, a resource with neither a lock
// held nor a mark stored: most likely a typo, which would fence a resource nobody
// uses. -new fences it anyway.
func refuseUnknown(ctx context.Context, cfg *config, lc *lockclient.Client, db *sql.DB, driver string, args []string) error {
	for _, r := range args {
		if checkLockName(r) == nil {
			_, err := lc.Holder(ctx, r)
			if err == nil {
				continue
			}
			if !errors.Is(err, lockclient.ErrNotHeld) {
				return cfg.etcdErr(err)
			}
		}
		mark, err := fencemark.Read(ctx, db, dialect(driver), r)
		if err != nil {
			return fmt.Errorf("read the mark of %q: %w", r, err)
		}
		if mark == 0 {
			return fmt.Errorf("%q: no lock held and no mark stored (a typo?); nothing fenced; "+
				"give -new to store a mark for it anyway (fencectl fence -new %s)", r, r)
		}
	}
	return nil
}

func fenceOne(ctx context.Context, cfg *config, lc *lockclient.Client, db *sql.DB, driver, r string) (fenceJSON, error) {
	res := fenceJSON{Resource: r}
	// The holder is read before the next token, so its token is below it.
	if checkLockName(r) == nil {
		info, err := lc.Holder(ctx, r)
		switch {
		case err == nil:
			res.HolderToken, res.Set = info.Token, info.Set
		case !errors.Is(err, lockclient.ErrNotHeld):
			return res, cfg.etcdErr(err)
		}
	}
	next, err := lc.NextToken(ctx)
	if err != nil {
		return res, cfg.etcdErr(err)
	}
	res.Before, res.After, err = fencemark.Raise(ctx, db, dialect(driver), r, next)
	if err != nil {
		return res, fmt.Errorf("raise the mark of %q: %w", r, err)
	}
	if cfg.release && res.HolderToken > 0 {
		err := lc.Release(ctx, r, res.HolderToken)
		var nh *lockclient.NotHeldError
		switch {
		case err == nil:
			res.Released = true
		case errors.As(err, &nh):
			// The holder let go or lost it meanwhile; a successor's key is kept.
		default:
			return res, cfg.etcdErr(err)
		}
	}
	return res, nil
}

// fenceAll raises every stored mark to etcd's next token (fencemark.RaiseAll) and
// returns the locks held now, to fence by name: a resource whose mark a failover lost
// entirely has no row to raise.
func fenceAll(ctx context.Context, cfg *config, lc *lockclient.Client, db *sql.DB, driver string, out io.Writer) ([]string, error) {
	next, err := lc.NextToken(ctx)
	if err != nil {
		return nil, cfg.etcdErr(err)
	}
	n, err := fencemark.RaiseAll(ctx, db, dialect(driver), next)
	if err != nil {
		return nil, fmt.Errorf("raise every mark: %w", err)
	}
	if !cfg.json {
		fmt.Fprintf(out, "raised %d marks to %d: every write with a token below %d is refused where a mark is stored\n", n, next, next)
	}
	infos, err := lc.List(ctx)
	if err != nil {
		return nil, cfg.etcdErr(err)
	}
	names := make([]string, 0, len(infos))
	for _, in := range infos {
		names = append(names, in.Name)
	}
	return names, nil
}

func printFence(out io.Writer, r fenceJSON) {
	fmt.Fprintf(out, "fenced %q: mark %d -> %d: every write with a token below %d is refused\n", r.Resource, r.Before, r.After, r.After)
	switch {
	case checkLockName(r.Resource) != nil:
		fmt.Fprintf(out, "  not a lock name: no holder looked up\n")
	case r.HolderToken == 0:
		fmt.Fprintf(out, "  nobody holds the lock\n")
	default:
		fmt.Fprintf(out, "  holder token %d: %d below the mark, its writes are refused\n", r.HolderToken, r.After-r.HolderToken)
		if !r.Released {
			fmt.Fprintf(out, "  the holder keeps the lock: to write again it must release and re-acquire;\n"+
				"  a new holder waits for it (fence -release frees the key now)\n")
		}
	}
	if r.Released {
		fmt.Fprintf(out, "  released %q (token %d)\n", r.Resource, r.HolderToken)
	}
	if len(r.Set) > 1 {
		others := slices.DeleteFunc(slices.Clone(r.Set), func(n string) bool { return n == r.Resource })
		fmt.Fprintf(out, "  token %d holds a set: fence %s too (fencectl fence %s)\n", r.HolderToken,
			strings.Join(others, ", "), strings.Join(others, " "))
	}
}
