package sqlfence_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

type backend struct {
	name string
	open func(testing.TB) (*sql.DB, string)
	d    migrations.Dialect
}

var backends = []backend{
	{"mariadb", mysqlDB, migrations.MySQL},
	{"sqlite", sqliteDB, migrations.SQLite},
	{"postgres", postgresDB, migrations.Postgres},
}

// migrationsDialect is the migrations package's name for d.
func migrationsDialect(d migrations.Dialect) migrations.Dialect {
	switch d {
	case migrations.SQLite:
		return migrations.SQLite
	case migrations.Postgres:
		return migrations.Postgres
	}
	return migrations.MySQL
}

// forEach runs fn against every backend as a subtest, each on a fresh database.
func forEach(t *testing.T, fn func(t *testing.T, db *sql.DB, s *sqlfence.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db, _ := b.open(t)
			fn(t, db, newStore(db, b.d))
		})
	}
}

// TestStore_Update_quotedIdentifiers writes to a table and columns whose names hold
// the quote characters of both dialects: quoting must name them exactly, not refuse
// them and not let them change the statement.
func TestStore_Update_quotedIdentifiers(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		tbl := "we\"ird`tab'le; --"
		mustExec(t, db, "CREATE TABLE "+quote(s.Dialect(), tbl)+" ("+
			quote(s.Dialect(), "k`\"ey")+" VARCHAR(20) PRIMARY KEY, "+
			quote(s.Dialect(), "va\"l`u?e")+" BIGINT NOT NULL, "+
			quote(s.Dialect(), "tok`en")+" BIGINT NOT NULL DEFAULT 0)")
		mustExec(t, db, "INSERT INTO "+quote(s.Dialect(), tbl)+" VALUES ('a', 1, 0), ('b', 2, 0)")
		row := fence.Row{Table: tbl, Key: []fence.Col{{Name: "k`\"ey", Value: "a"}}, TokenColumn: "tok`en"}
		g := fence.NewGrant("quoted", 5)
		if err := s.Update(t.Context(), g, row, fence.Col{Name: "va\"l`u?e", Value: 42}); err != nil {
			t.Fatalf("Update() = %v", err)
		}
		if err := s.Upsert(t.Context(), g, row, fence.Col{Name: "va\"l`u?e", Value: 43}); err != nil {
			t.Fatalf("Upsert() = %v", err)
		}
		got := queryInt(t, db, "SELECT "+quote(s.Dialect(), "va\"l`u?e")+" FROM "+quote(s.Dialect(), tbl)+" WHERE "+quote(s.Dialect(), "k`\"ey")+" = 'a'")
		other := queryInt(t, db, "SELECT "+quote(s.Dialect(), "va\"l`u?e")+" FROM "+quote(s.Dialect(), tbl)+" WHERE "+quote(s.Dialect(), "k`\"ey")+" = 'b'")
		if got != 43 || other != 2 {
			t.Fatalf("values = %d, %d; want 43, 2", got, other)
		}
		if err := s.Delete(t.Context(), fence.NewGrant("quoted", 6), row); err != nil {
			t.Fatalf("Delete() = %v", err)
		}
	})
}

func quote(d migrations.Dialect, name string) string {
	q := `"`
	if d == migrations.MySQL {
		q = "`"
	}
	return q + strings.ReplaceAll(name, q, q+q) + q
}

// TestStore_duplicateKey maps unique-key violations of both dialects to one error.
func TestStore_duplicateKey(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		mustExec(t, db, "CREATE TABLE users (id VARCHAR(20) PRIMARY KEY, email VARCHAR(50) NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
		mustExec(t, db, "CREATE UNIQUE INDEX users_email ON users (email)")
		mustExec(t, db, "INSERT INTO users (id, email) VALUES ('neo', 'neo@example.com'), ('trinity', 'trinity@example.com')")
		g := fence.NewGrant("users", 3)
		want := "users_email"
		if s.Dialect() == migrations.SQLite {
			want = "users.email" // SQLite names the columns, not the index
		}
		check := func(op string, err error) {
			t.Helper()
			var de *nolock.DuplicateError
			if !errors.Is(err, nolock.ErrDuplicate) || !errors.As(err, &de) {
				t.Fatalf("%s = %v, want a *nolock.DuplicateError", op, err)
			}
			if de.Table != "users" || de.Constraint != want || de.Err == nil {
				t.Fatalf("%s: DuplicateError = %+v, want table users, constraint %q", op, de, want)
			}
		}
		row := func(id string) fence.Row {
			return fence.Row{Table: "users", Key: []fence.Col{{Name: "id", Value: id}}}
		}
		check("Update", s.Update(t.Context(), g, row("trinity"), fence.Col{Name: "email", Value: "neo@example.com"}))
		// An insert of a new key whose email belongs to another row: MySQL's
		// ON DUPLICATE KEY UPDATE must not update neo's row in its place.
		err := s.Upsert(t.Context(), g, row("smith"), fence.Col{Name: "email", Value: "neo@example.com"})
		if !errors.Is(err, nolock.ErrDuplicate) {
			t.Fatalf("Upsert clashing on another unique key = %v, want ErrDuplicate", err)
		}
		if n := queryInt(t, db, "SELECT COUNT(*) FROM users WHERE id = 'smith' OR fence_token <> 0"); n != 0 {
			t.Fatalf("%d rows written by refused writes", n)
		}
		if n := queryInt(t, db, "SELECT COUNT(*) FROM fence_tokens WHERE resource = 'users'"); n != 0 {
			t.Fatal("a refused upsert left its fence raise")
		}
	})
}

// TestStore_badInput checks every refusal names its sentinel, before any I/O.
func TestStore_badInput(t *testing.T) {
	g := fence.NewGrant("r", 1)
	key := []fence.Col{{Name: "id", Value: 1}}
	var nilStore *sqlfence.Store
	db, err := sql.Open("sqlite", "file:unused?mode=memory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := newStore(db, migrations.MySQL)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"nil store", nilStore.Delete(t.Context(), g, fence.Row{Table: "t", Key: key}), fence.ErrInvalidArgument},
		{"two dots", s.Update(t.Context(), g, fence.Row{Table: "a.b.c", Key: key}, fence.Col{Name: "v", Value: 1}), fencetest.Invalid(`table name "a.b.c" has more than one dot`)},
		{"empty schema", s.Update(t.Context(), g, fence.Row{Table: ".t", Key: key}, fence.Col{Name: "v", Value: 1}), fencetest.Invalid("invalid identifier: empty schema name")},
		{"overlong mysql column", s.Update(t.Context(), g, fence.Row{Table: "t", Key: key}, fence.Col{Name: strings.Repeat("c", 65), Value: 1}), fencetest.Invalid("is longer than mysql's 64 characters")},
		{"not utf-8", s.Update(t.Context(), g, fence.Row{Table: "t\xff", Key: key}, fence.Col{Name: "v", Value: 1}), fencetest.Invalid(`table name "t\xff" is not UTF-8`)},
		{"nul in token column", s.Update(t.Context(), g, fence.Row{Table: "t", Key: key, TokenColumn: "a\x00"}, fence.Col{Name: "v", Value: 1}), fencetest.Invalid("token column name \"a\\x00\" contains a NUL byte")},
		{"column set twice", s.Update(t.Context(), g, fence.Row{Table: "t", Key: key}, fence.Col{Name: "v", Value: 1}, fence.Col{Name: "V", Value: 2}), fence.ErrInvalidArgument},
		{"key column set", s.Upsert(t.Context(), g, fence.Row{Table: "t", Key: key}, fence.Col{Name: "id", Value: 2}), fence.ErrInvalidArgument},
		{"token column set", s.Update(t.Context(), g, fence.Row{Table: "t", Key: key}, fence.Col{Name: "fence_token", Value: 99}), fence.ErrInvalidArgument},
		{"bad grant first", s.Update(t.Context(), fence.NewGrant("r", 0), fence.Row{}, fence.Col{Name: "", Value: 1}), fencetest.Invalid(`fence: invalid token 0 for "r"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !fencetest.Match(tt.err, tt.want) {
				t.Fatalf("error = %v, want %v", tt.err, tt.want)
			}
		})
	}
}

func queryString(t testing.TB, db *sql.DB, q string) string {
	t.Helper()
	var v string
	if err := db.QueryRowContext(t.Context(), q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// TestStore_missingSchema names the fix when fence_tokens was never migrated.
func TestStore_missingSchema(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db, _ := b.open(t)
			if err := migrations.Down(t.Context(), db, migrationsDialect(b.d)); err != nil {
				t.Fatal(err)
			}
			s := newStore(db, b.d)
			err := s.Fenced(t.Context(), fence.NewGrant("r", 1), func(*sql.Tx) error { return nil })
			if !errors.Is(err, fence.ErrSchema) {
				t.Fatalf("Fenced() without fence_tokens = %v, want ErrSchema", err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	db, err := sql.Open("sqlite", "file:unused?mode=memory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tests := []struct {
		name string
		d    migrations.Dialect
		db   *sql.DB
		opts []sqlfence.Option
		want error
	}{
		{"mysql read committed", migrations.MySQL, db, []sqlfence.Option{sqlfence.WithTxOptions(sql.TxOptions{Isolation: sql.LevelReadCommitted})}, nil},
		{"sqlite serializable", migrations.SQLite, db, []sqlfence.Option{sqlfence.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable})}, nil},
		{"sqlite read committed", migrations.SQLite, db, []sqlfence.Option{sqlfence.WithTxOptions(sql.TxOptions{Isolation: sql.LevelReadCommitted})}, fence.ErrInvalidArgument},
		{"read only", migrations.MySQL, db, []sqlfence.Option{sqlfence.WithTxOptions(sql.TxOptions{ReadOnly: true})}, fence.ErrInvalidArgument},
		{"snapshot", migrations.MySQL, db, []sqlfence.Option{sqlfence.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSnapshot})}, fence.ErrInvalidArgument},
		{"nil option", migrations.MySQL, db, []sqlfence.Option{nil}, nil},
		{"nil option among others", migrations.SQLite, db, []sqlfence.Option{nil, sqlfence.WithIdleTimeout(time.Second), nil}, nil},
		{"idle timeout under 1ms", migrations.SQLite, db, []sqlfence.Option{sqlfence.WithIdleTimeout(0)}, fence.ErrInvalidArgument},
		{"nil db", migrations.MySQL, nil, nil, fence.ErrInvalidArgument},
		{"unknown dialect", 7, db, nil, fencetest.Invalid("sqlfence: unknown dialect 7")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sqlfence.New(tt.db, tt.d, tt.opts...)
			if !fencetest.Match(err, tt.want) || (err == nil) != (s != nil) {
				t.Fatalf("New() = %v, %v; want error %v", s, err, tt.want)
			}
			if err != nil && len(tt.opts) > 0 && !strings.Contains(err.Error(), "With") {
				t.Fatalf("New() error %q does not name the option", err)
			}
		})
	}
}

// TestStore_Fenced_isolationLevels runs the GC-pause refusal under every MySQL
// isolation level: the fence row is written, so it is read current at any level.
func TestStore_Fenced_isolationLevels(t *testing.T) {
	db, _ := mysqlDB(t)
	mustExec(t, db, "CREATE TABLE acct (id INT PRIMARY KEY, total INT NOT NULL)")
	mustExec(t, db, "INSERT INTO acct VALUES (42, 0)")
	levels := []sql.IsolationLevel{sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}
	for i, level := range levels {
		t.Run(level.String(), func(t *testing.T) {
			s, err := sqlfence.New(db, migrations.MySQL, sqlfence.WithTxOptions(sql.TxOptions{Isolation: level}))
			if err != nil {
				t.Fatal(err)
			}
			res := "acct-" + level.String()
			write := func(tok fence.Token, total int) error {
				return fence.Exec(t.Context(), s, fence.NewGrant(res, tok), func(tx *sql.Tx) error {
					_, err := tx.ExecContext(t.Context(), "UPDATE acct SET total = ? WHERE id = 42", total)
					return err
				})
			}
			if err := write(34, 200+i); err != nil {
				t.Fatal(err)
			}
			if err := write(33, 999); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("stale write = %v, want ErrStale", err)
			}
			if got := queryInt(t, db, "SELECT total FROM acct"); got != int64(200+i) {
				t.Fatalf("total = %d", got)
			}
		})
	}
}
