package scenario_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

const createTotals = `CREATE TABLE totals (account VARCHAR(200) PRIMARY KEY, total BIGINT NOT NULL, token BIGINT NOT NULL)`

// totalsStore is a job's database as the job's own code sees it: a fence.Store of
// the adapter's transaction type, and the job's write through it.
type totalsStore struct {
	write func(ctx context.Context, g fence.Grant, total int) error
	close func()
}

// totalsDB is a database the totals job runs on, fenced or not.
type totalsDB struct {
	name  string
	setup func(t *testing.T) string
	open  func(ctx context.Context, w *scenario.Worker, fenced bool) (totalsStore, error)
	read  func(ctx context.Context, dsn string) (map[string]string, error)
}

var totalsDBs = []totalsDB{
	{"sqlite", totalsSetupSQLite, totalsOpenSQLite, totalsReadSQLite},
	{"postgres", totalsSetupPG, totalsOpenPG, totalsReadPG},
}

// totalsConfig is the totals job: each worker takes the account's lock, checks
// the lock's context as an unfenced job would, and writes its total through
// scenario.Store over the fenced store, or over a plain transaction.
func totalsConfig(d totalsDB, fenced bool) scenario.Config {
	return scenario.Config{
		Workers: []string{"a", "b"},
		Setup:   d.setup,
		Job: func(ctx context.Context, w *scenario.Worker) error {
			s, err := d.open(ctx, w, fenced)
			if err != nil {
				return err
			}
			defer s.close()
			l, err := w.Acquire(ctx, "account-7")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			if err := l.Context().Err(); err != nil {
				return fence.ErrLost // the unfenced job's only check
			}
			return s.write(ctx, l, 100)
		},
		Read: d.read,
	}
}

// inStorePause is the GC-pause timeline frozen at InStore: a has passed its
// lock's checks when it freezes; b takes the lock and writes; a wakes and sends
// its write with its old token.
func inStorePause() []*scenario.Step {
	return []*scenario.Step{
		scenario.Start("a"),
		scenario.Freeze("a").When("a", scenario.InStore).Until("b", scenario.Finished),
		scenario.Start("b"),
	}
}

// TestStore_inStore: frozen at InStore, the fenced job's stale write is refused
// by the store itself (refused stale), while a job that only checks its lock's
// context lets a's write land over b's, and the verdict says so.
func TestStore_inStore(t *testing.T) {
	for _, d := range totalsDBs {
		t.Run(d.name+"/fenced", func(t *testing.T) {
			t.Parallel() // a run mostly waits out a lease
			h := scenario.Run(t, totalsConfig(d, true), inStorePause()...)
			a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
			if b.Outcome != scenario.Acknowledged || a.Outcome != scenario.RefusedStale || a.Token >= b.Token {
				t.Fatalf("a's write %+v, b's %+v: want b's acknowledged and a's (lower token) refused stale by the store", a, b)
			}
			if !strings.Contains(h.Timelines(), `reached "in store"; #`) {
				t.Fatalf("no InStore reach in the timeline:\n%s", h.Timelines())
			}
		})
		t.Run(d.name+"/unfenced", func(t *testing.T) {
			t.Parallel() // a run mostly waits out a lease
			h := scenario.Record(t, totalsConfig(d, false), inStorePause()...)
			a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
			err := h.Check()
			if !errors.Is(err, scenario.ErrViolation) || a.Outcome != scenario.Acknowledged ||
				h.Final["account-7"] != strconv.FormatInt(int64(a.Token), 10) {
				t.Fatalf("Check() = %v, a's write %+v, b's %+v, final %v: want a's stale write landed over b's, caught", err, a, b, h.Final)
			}
		})
	}
}

// plainSQL is a job's store with no fence: a transaction, nothing raised.
type plainSQL struct{ db *sql.DB }

func (p plainSQL) Fenced(ctx context.Context, _ fence.Grant, fn func(*sql.Tx) error) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// plainPG is plainSQL on pgx.
type plainPG struct{ pool *pgxpool.Pool }

func (p plainPG) Fenced(ctx context.Context, _ fence.Grant, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, p.pool, fn)
}

func totalsSetupSQLite(t *testing.T) string {
	path := t.TempDir() + "/totals.db"
	db := openSQLite(t, path)
	if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), createTotals); err != nil {
		t.Fatal(err)
	}
	return path
}

func totalsOpenSQLite(ctx context.Context, w *scenario.Worker, fenced bool) (totalsStore, error) {
	db, err := sqlite.Open(w.Data())
	if err != nil {
		return totalsStore{}, err
	}
	var store fence.Store[*sql.Tx] = plainSQL{db}
	if fenced {
		if store, err = sqlfence.New(db, migrations.SQLite); err != nil {
			db.Close()
			return totalsStore{}, err
		}
	}
	store = scenario.Store(w, store)
	write := func(ctx context.Context, g fence.Grant, total int) error {
		return fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO totals (account, total, token) VALUES (?, ?, ?)
ON CONFLICT (account) DO UPDATE SET total = excluded.total, token = excluded.token`, g.Resource(), total, g.Token())
			return err
		})
	}
	return totalsStore{write, func() { db.Close() }}, nil
}

func totalsReadSQLite(ctx context.Context, path string) (map[string]string, error) {
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return readToken(ctx, db, "account-7")
}

func totalsSetupPG(t *testing.T) string {
	dsn := postgres.DSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(t.Context(), db, migrations.Postgres); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), createTotals); err != nil {
		t.Fatal(err)
	}
	return dsn
}

func totalsOpenPG(ctx context.Context, w *scenario.Worker, fenced bool) (totalsStore, error) {
	pool, err := pgxpool.New(ctx, w.Data())
	if err != nil {
		return totalsStore{}, err
	}
	var store fence.Store[pgx.Tx] = plainPG{pool}
	if fenced {
		if store, err = pgxfence.New(pool); err != nil {
			pool.Close()
			return totalsStore{}, err
		}
	}
	store = scenario.Store(w, store)
	write := func(ctx context.Context, g fence.Grant, total int) error {
		return fence.Exec(ctx, store, g, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO totals (account, total, token) VALUES ($1, $2, $3)
ON CONFLICT (account) DO UPDATE SET total = EXCLUDED.total, token = EXCLUDED.token`, g.Resource(), total, g.Token())
			return err
		})
	}
	return totalsStore{write, pool.Close}, nil
}

func totalsReadPG(ctx context.Context, dsn string) (map[string]string, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return readToken(ctx, db, "account-7")
}

// readToken returns the token the account's total was last written with.
func readToken(ctx context.Context, db *sql.DB, account string) (map[string]string, error) {
	var tok string
	err := db.QueryRowContext(ctx, `SELECT token FROM totals WHERE account = $1`, account).Scan(&tok)
	if errors.Is(err, sql.ErrNoRows) {
		return map[string]string{}, nil
	}
	return map[string]string{account: tok}, err
}
