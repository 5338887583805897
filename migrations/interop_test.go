package migrations_test

import (
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/fencegate/fencegate/migrations"
)

// migrationsTable is where Up and Down keep fencegate's version, as the package doc says.
const migrationsTable = "fencegate_schema_migrations"

// golangMigrate runs fencegate's own folder the way an application that prefers
// golang-migrate would: FS, iofs and fencegate_schema_migrations, on a handle of its own.
func golangMigrate(t *testing.T, dd dialectDB, own *sql.DB) *migrate.Migrate {
	t.Helper()
	fsys, err := migrations.FS(dd.d)
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, dd.d.String(), dd.driver(t, own, migrationsTable))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUp_golangMigrateReadsTheVersion checks that Up records its version as
// golang-migrate does, in both directions: golang-migrate, given fencegate's folder,
// finds nothing to do after Up and can take it down; Up then brings it back, and
// after golang-migrate brought it up, Up finds nothing to do.
func TestUp_golangMigrateReadsTheVersion(t *testing.T) {
	for _, dd := range dialects {
		t.Run(dd.d.String(), func(t *testing.T) {
			ctx := t.Context()
			db, again := dd.open(t)
			if err := migrations.Up(ctx, db, dd.d); err != nil {
				t.Fatal(err)
			}
			gm := golangMigrate(t, dd, again(t))
			if err := gm.Up(); !errors.Is(err, migrate.ErrNoChange) {
				t.Fatalf("golang-migrate Up after fencegate's Up = %v, want ErrNoChange", err)
			}
			v, dirty, err := gm.Version()
			if err != nil || dirty || v < 3 {
				t.Fatalf("golang-migrate reads version %d (dirty %v, %v), want the last migration, clean", v, dirty, err)
			}
			if err := gm.Down(); err != nil {
				t.Fatalf("golang-migrate Down: %v", err)
			}
			if got := dd.objects(t, db); got["fence_tokens"] {
				t.Fatal("fence_tokens left after golang-migrate's Down")
			}
			if err := gm.Up(); err != nil {
				t.Fatalf("golang-migrate Up: %v", err)
			}
			if err := migrations.Up(ctx, db, dd.d); err != nil {
				t.Fatalf("Up after golang-migrate's Up: %v", err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO fence_tokens (resource, token) VALUES ('a', 1)`); err != nil {
				t.Fatalf("fence_tokens after both: %v", err)
			}
			if err := migrations.Down(ctx, db, dd.d); err != nil {
				t.Fatalf("Down after golang-migrate's Up: %v", err)
			}
			if got := dd.objects(t, db); got["fence_tokens"] {
				t.Fatal("fence_tokens left after Down")
			}
		})
	}
}

// TestUp_concurrent runs Up from several goroutines at once on a fresh database:
// each either applies or finds the work done; none fails or half-applies.
func TestUp_concurrent(t *testing.T) {
	for _, dd := range dialects {
		t.Run(dd.d.String(), func(t *testing.T) {
			db, _ := dd.open(t)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Go(func() { errs <- migrations.Up(t.Context(), db, dd.d) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent Up: %v", err)
				}
			}
			if got := dd.objects(t, db); !got["fence_tokens"] || !got["idempotency_keys"] {
				t.Fatalf("after concurrent Up: %v", got)
			}
		})
	}
}

// TestUp_dirty refuses a schema an earlier run left dirty, and changes nothing.
func TestUp_dirty(t *testing.T) {
	for _, dd := range dialects {
		t.Run(dd.d.String(), func(t *testing.T) {
			ctx := t.Context()
			db, _ := dd.open(t)
			if err := migrations.Up(ctx, db, dd.d); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "UPDATE "+migrationsTable+" SET dirty = TRUE"); err != nil {
				t.Fatal(err)
			}
			if err := migrations.Down(ctx, db, dd.d); !errors.Is(err, migrations.ErrDirty) {
				t.Fatalf("Down on a dirty schema = %v, want ErrDirty", err)
			}
			if got := dd.objects(t, db); !got["fence_tokens"] {
				t.Fatal("a refused Down dropped fence_tokens")
			}
		})
	}
}
