package scenario_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// styleDB is a store the job styles write account-7's total to: a fenced
// transaction through scenario.Store (over the fenced store or a plain one), or
// one statement outside a transaction (recorded with Worker.Write).
type styleDB interface {
	// tx writes in a transaction begun on ctx, its statements on stmt; with
	// check, it first checks the lock inside the transaction.
	tx(ctx, stmt context.Context, w *scenario.Worker, l *lockclient.Lock, fenced, check bool) error
	// bare writes with one statement on stmt.
	bare(ctx, stmt context.Context, w *scenario.Worker, l *lockclient.Lock) error
	close()
}

// jobStyle is where a job runs its statements and checks its lock.
type jobStyle struct {
	name   string
	fenced bool
	write  func(ctx context.Context, w *scenario.Worker, l *lockclient.Lock, db styleDB) error
	bare   bool // the write is one statement, recorded with Worker.Write
}

// jobStyles: fenced, statements on the job's ctx, on the lock's context (the
// README's quick start), or the lock checked inside the transaction; and the
// same three without a fence (the lock's context one as a plain UPDATE on it).
var jobStyles = []jobStyle{
	{"fenced/jobCtx", true, func(ctx context.Context, w *scenario.Worker, l *lockclient.Lock, db styleDB) error {
		return db.tx(ctx, ctx, w, l, true, false)
	}, false},
	{"fenced/lockCtx", true, func(ctx context.Context, w *scenario.Worker, l *lockclient.Lock, db styleDB) error {
		work := l.Context()
		return db.tx(work, work, w, l, true, false)
	}, false},
	{"fenced/checkInTx", true, func(ctx context.Context, w *scenario.Worker, l *lockclient.Lock, db styleDB) error {
		return db.tx(ctx, ctx, w, l, true, true)
	}, false},
	{"unfenced/jobCtx", false, func(ctx context.Context, w *scenario.Worker, l *lockclient.Lock, db styleDB) error {
		return db.tx(ctx, ctx, w, l, false, false)
	}, false},
	{"unfenced/lockCtx", false, func(ctx context.Context, w *scenario.Worker, l *lockclient.Lock, db styleDB) error {
		return db.bare(ctx, l.Context(), w, l)
	}, true},
	{"unfenced/checkInTx", false, func(ctx context.Context, w *scenario.Worker, l *lockclient.Lock, db styleDB) error {
		return db.tx(ctx, ctx, w, l, false, true)
	}, false},
}

// styleConfig runs style on the database open makes, two workers on account-7.
func styleConfig(s jobStyle, setup func(*testing.T) string, open func(context.Context, *scenario.Worker) (styleDB, error),
	read func(context.Context, string) (map[string]string, error)) scenario.Config {
	return scenario.Config{
		Workers: []string{"a", "b"},
		Setup:   setup,
		Job: func(ctx context.Context, w *scenario.Worker) error {
			db, err := open(ctx, w)
			if err != nil {
				return err
			}
			defer db.close()
			l, err := w.Acquire(ctx, "account-7")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			return s.write(ctx, w, l, db)
		},
		Read: read,
	}
}

// pause is the GC-pause timeline frozen at point: a freezes there, past its
// lease; b takes the lock and writes; a wakes once b has finished.
func pause(point string) []*scenario.Step {
	return []*scenario.Step{
		scenario.Start("a"),
		scenario.Freeze("a").When("a", point).Until("b", scenario.Finished),
		scenario.Start("b"),
	}
}

// TestJobStyles_postgres: with a's write frozen in flight (its statement held by
// the kit's proxy until b has written), every fenced style passes, the store
// refusing a's write, and every unfenced style fails, naming b's lost write.
func TestJobStyles_postgres(t *testing.T) {
	for _, s := range jobStyles {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel() // a run mostly waits out a lease
			cfg := styleConfig(s, totalsSetupPG, openStylePG, totalsReadPG)
			cfg.StoreServer = postgres
			h := scenario.Record(t, cfg, pause(scenario.OnTheWire)...)
			if !strings.Contains(h.Timelines(), `reached "on the wire"`) {
				t.Fatalf("a's write was not held in flight:\n%s", h.Timelines())
			}
			t.Logf("timelines:\n%s", h.Timelines())
			checkStyle(t, h, s.fenced)
			if a := writeOf(t, h, "a"); s.fenced && a.Outcome != scenario.RefusedStale &&
				(a.Outcome != scenario.CommitUnknown || !strings.Contains(h.Timelines(), "delivered to the store: answered")) {
				t.Fatalf("a's write %+v: want it refused by the store (refused stale, or commit unknown once the store answered)", a)
			}
		})
	}
}

// TestJobStyles_sqlite: SQLite has no network hop, so a is frozen at the last
// point before its write (InStore, or AboutToWrite for a bare statement).
// Fenced styles pass; the unfenced job on its ctx fails; the unfenced jobs that
// check their lock after that point stop themselves when they wake (nothing of
// theirs was in flight, and a write begun holds SQLite's write lock), so no
// stale write lands and the verdict is right to pass.
func TestJobStyles_sqlite(t *testing.T) {
	for _, s := range jobStyles {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel() // a run mostly waits out a lease
			point := scenario.InStore
			if s.bare {
				point = scenario.AboutToWrite
			}
			h := scenario.Record(t, styleConfig(s, totalsSetupSQLite, openStyleSQLite, totalsReadSQLite), pause(point)...)
			caught := !s.fenced && s.name == "unfenced/jobCtx"
			checkStyle(t, h, !caught)
		})
	}
}

// checkStyle holds h to the verdict: with pass, Check passes and b's write is the
// final state; else Check names b's acknowledged write, lost to a's lower token.
func checkStyle(t *testing.T, h *scenario.History, pass bool) {
	t.Helper()
	a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
	err := h.Check()
	if pass {
		if err != nil || b.Outcome != scenario.Acknowledged || h.Final["account-7"] != b.Value || a.Outcome == scenario.Acknowledged {
			t.Fatalf("Check() = %v; a's write %+v, b's %+v, final %v: want b's write kept and a's refused", err, a, b, h.Final)
		}
		return
	}
	want := fmt.Sprintf(`b's acknowledged write at token %d (%q) is lost: the final value %q is a's write at the lower token %d`, b.Token, b.Value, a.Value, a.Token)
	if !errors.Is(err, scenario.ErrViolation) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check() = %v; want a violation saying %q", err, want)
	}
}

const (
	upsertTotalPG     = `INSERT INTO totals (account, total, token) VALUES ($1, $2, $3) ON CONFLICT (account) DO UPDATE SET total = EXCLUDED.total, token = EXCLUDED.token`
	upsertTotalSQLite = `INSERT INTO totals (account, total, token) VALUES (?, ?, ?) ON CONFLICT (account) DO UPDATE SET total = excluded.total, token = excluded.token`
)

// checkLock is the job's own check of its lock, inside the transaction.
func checkLock(l *lockclient.Lock) error {
	if l.Context().Err() != nil {
		return fence.ErrLost
	}
	return nil
}

type stylePG struct{ pool *pgxpool.Pool }

func openStylePG(ctx context.Context, w *scenario.Worker) (styleDB, error) {
	dsn, err := w.StoreDSN(w.Data())
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	return stylePG{pool}, err
}

func (d stylePG) tx(ctx, stmt context.Context, w *scenario.Worker, l *lockclient.Lock, fenced, check bool) error {
	var store fence.Store[pgx.Tx] = plainPG(d)
	if fenced {
		var err error
		if store, err = pgxfence.New(d.pool); err != nil {
			return err
		}
	}
	return fence.Exec(ctx, scenario.Store(w, store), l, func(tx pgx.Tx) error {
		if check {
			if err := checkLock(l); err != nil {
				return err
			}
		}
		_, err := tx.Exec(stmt, upsertTotalPG, l.Resource(), 100, l.Token())
		return err
	})
}

func (d stylePG) bare(ctx, stmt context.Context, w *scenario.Worker, l *lockclient.Lock) error {
	return w.Write(ctx, l, strconv.FormatInt(int64(l.Token()), 10), func(context.Context) error {
		_, err := d.pool.Exec(stmt, upsertTotalPG, l.Resource(), 100, l.Token())
		return err
	})
}

func (d stylePG) close() { d.pool.Close() }

type styleSQLite struct{ db *sql.DB }

func openStyleSQLite(ctx context.Context, w *scenario.Worker) (styleDB, error) {
	db, err := sqlite.Open(w.Data())
	return styleSQLite{db}, err
}

func (d styleSQLite) tx(ctx, stmt context.Context, w *scenario.Worker, l *lockclient.Lock, fenced, check bool) error {
	var store fence.Store[*sql.Tx] = plainSQL(d)
	if fenced {
		var err error
		if store, err = sqlfence.New(d.db, migrations.SQLite); err != nil {
			return err
		}
	}
	return fence.Exec(ctx, scenario.Store(w, store), l, func(tx *sql.Tx) error {
		if check {
			if err := checkLock(l); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(stmt, upsertTotalSQLite, l.Resource(), 100, int64(l.Token()))
		return err
	})
}

func (d styleSQLite) bare(ctx, stmt context.Context, w *scenario.Worker, l *lockclient.Lock) error {
	return w.Write(ctx, l, strconv.FormatInt(int64(l.Token()), 10), func(context.Context) error {
		_, err := d.db.ExecContext(stmt, upsertTotalSQLite, l.Resource(), 100, int64(l.Token()))
		return err
	})
}

func (d styleSQLite) close() { d.db.Close() }
