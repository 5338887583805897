//go:build unix

package leadprocess_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// holderRounds is how many times each holder takes the lock and increments.
const holderRounds = 3

// counterJob takes the counter's lock holderRounds times and each time increments
// it in a fenced transaction that records "WORKER@TOKEN#ROUND" as the counter's
// last writer. A write refused because the lock passed on ends that round, not
// the job.
func counterJob(ctx context.Context, w *scenario.Worker) error {
	db, err := sqlite.Open(w.Data())
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		return err
	}
	for round := range holderRounds {
		l, err := w.Acquire(ctx, "counter")
		if err != nil {
			return err
		}
		value := fmt.Sprintf("%s@%d#%d", w.Name(), l.Token(), round)
		err = w.Write(ctx, l, value, func(ctx context.Context) error {
			return fence.Exec(ctx, store, l, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `UPDATE counter SET n = n + 1, v = ?`, value); err != nil {
					return err
				}
				return w.Reach(ctx, "in transaction")
			})
		})
		l.Release(context.WithoutCancel(ctx))
		if err != nil && !errors.Is(err, fence.ErrStale) && !errors.Is(err, fence.ErrLost) {
			return err
		}
	}
	return nil
}

// TestHolders_kit runs three lock holders incrementing one counter while b is
// frozen at a write past its lease and c is killed inside its transaction: the kit's verdict holds, and the
// counter counts every acknowledged increment and no refused one.
func TestHolders_kit(t *testing.T) {
	h := scenario.Run(t, scenario.Config{
		Workers: []string{"a", "b", "c"},
		Setup: func(t *testing.T) string {
			path := t.TempDir() + "/counter.db"
			db, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(t.Context(), `CREATE TABLE counter (n BIGINT NOT NULL, v TEXT NOT NULL); INSERT INTO counter VALUES (0, '')`); err != nil {
				t.Fatal(err)
			}
			return path
		},
		Job: counterJob,
		Read: func(ctx context.Context, path string) (map[string]string, error) {
			db, err := sqlite.Open(path)
			if err != nil {
				return nil, err
			}
			defer db.Close()
			// "count" is no resource: the check passes it by, the test reads it.
			var n, v string
			err = db.QueryRowContext(ctx, `SELECT n, v FROM counter`).Scan(&n, &v)
			return map[string]string{"counter": v, "count": n}, err
		},
	},
		scenario.Start("b"),
		scenario.Freeze("b").When("b", scenario.AboutToWrite),
		scenario.Start("a"),
		scenario.Start("c"),
		scenario.Kill("c").When("c", "in transaction"),
	)
	var acked, unknown int
	for _, w := range h.Writes {
		switch w.Outcome {
		case scenario.Acknowledged:
			acked++
		case scenario.CommitUnknown:
			unknown++
		}
	}
	n, _ := strconv.Atoi(h.Final["count"])
	if n < acked || n > acked+unknown {
		t.Fatalf("counter %d after %d acknowledged and %d unknown increments:\n%s", n, acked, unknown, h.Timelines())
	}
	t.Logf("counter %d: %d acknowledged, %d unknown, %d writes", n, acked, unknown, len(h.Writes))
}
