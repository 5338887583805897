package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

// fenceEnv is a live holder of account-42 that has written once through
// sqlfence, and fencectl pointed at its etcd and database.
type fenceEnv struct {
	locks  *lockclient.Client
	holder *lockclient.Lock
	store  *sqlfence.Store
	dsn    string
}

func newFenceEnv(t *testing.T, srv *locktest.Cluster, db *sql.DB, d migrations.Dialect, dsn string) *fenceEnv {
	t.Helper()
	locks, err := lockclient.New(srv.Client(t), lockclient.WithIdentity("zombie"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	holder, err := locks.Acquire(t.Context(), "account-42")
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlfence.New(db, d)
	if err != nil {
		t.Fatal(err)
	}
	e := &fenceEnv{locks: locks, holder: holder, store: store, dsn: dsn}
	if err := e.write(t); err != nil {
		t.Fatalf("the holder's first write: %v", err)
	}
	t.Setenv("FENCECTL_ENDPOINTS", strings.Join(srv.Endpoints(), ","))
	return e
}

func (e *fenceEnv) write(t *testing.T) error {
	return fence.Exec(t.Context(), e.store, e.holder, func(*sql.Tx) error { return nil })
}

func TestRun_fence(t *testing.T) {
	srv := locktest.Start(t)
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	e := newFenceEnv(t, srv, db, migrations.SQLite, "sqlite:"+path)
	tok := e.holder.Token()

	// list -dsn: the holder has written with its token.
	code, out, errOut := fencectl(t, "-dsn", e.dsn, "list")
	if code != 0 || !regexpMatch(out, `account-42\s+`+strconv.FormatInt(int64(tok), 10)+`\s+zombie.*-\s+`+strconv.FormatInt(int64(tok), 10)+`\s+\+0\s+written`) {
		t.Fatalf("list -dsn before the fence: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = fencectl(t, "-dsn", e.dsn, "fence", "account-42")
	if code != 0 {
		t.Fatalf("fence: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "must release and re-acquire") || !strings.Contains(out, "a new holder waits for it") {
		t.Errorf("fence of a live holder does not say what it must do: %q", out)
	}
	var next int64
	for _, f := range strings.Fields(out) {
		if n, err := strconv.ParseInt(strings.TrimSuffix(f, ":"), 10, 64); err == nil && n > next {
			next = n
		}
	}
	want := "mark " + strconv.FormatInt(int64(tok), 10) + " -> " + strconv.FormatInt(next, 10)
	if next <= int64(tok) || !strings.Contains(out, want) || !strings.Contains(out, "holder token "+strconv.FormatInt(int64(tok), 10)) {
		t.Fatalf("fence said %q, want %q and the holder's token", out, want)
	}
	var stale *fence.StaleError
	if err := e.write(t); !errors.As(err, &stale) || int64(stale.Seen) != next {
		t.Fatalf("the holder's write after the fence = %v, want *fence.StaleError seeing %d", err, next)
	}
	if e.holder.Context().Err() != nil {
		t.Fatal("fence without -release ended the lock")
	}
	code, out, _ = fencectl(t, "-dsn", e.dsn, "show", "account-42")
	diff := strconv.FormatInt(int64(tok)-next, 10)
	if code != 0 || !regexpMatch(out, strconv.FormatInt(next, 10)+`\s+`+diff+`\s+fenced`) {
		t.Fatalf("show -dsn after the fence: exit %d\n%s", code, out)
	}
	// Fencing again never lowers the mark; -release frees the key.
	code, out, errOut = fencectl(t, "-dsn", e.dsn, "-json", "fence", "-release", "account-42")
	var res []fenceJSON
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res) != 1 ||
		int64(res[0].Before) != next || res[0].After < res[0].Before || !res[0].Released || res[0].HolderToken != tok {
		t.Fatalf("fence -release -json: exit %d: %s %s", code, out, errOut)
	}
	if _, err := e.locks.Holder(t.Context(), "account-42"); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("Holder after fence -release = %v, want ErrNotHeld", err)
	}
	// Nobody holds it now: the fence still works.
	code, out, _ = fencectl(t, "-dsn", e.dsn, "fence", "-new", "account-42", "unheld-1")
	if code != 0 || strings.Count(out, "nobody holds the lock") != 2 {
		t.Fatalf("fence of unheld resources: exit %d: %s", code, out)
	}

	// A set's holder: the note names the set's other names.
	set, err := e.locks.AcquireSet(t.Context(), []string{"account-7", "account-42"})
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ = fencectl(t, "-dsn", e.dsn, "fence", "account-42")
	if code != 0 || !strings.Contains(out, "token "+strconv.FormatInt(int64(set.Token()), 10)+" holds a set: fence account-7 too") {
		t.Fatalf("fence of a set member: exit %d: %s", code, out)
	}
	code, out, _ = fencectl(t, "list")
	if code != 0 || !strings.Contains(out, "account-42,account-7") {
		t.Fatalf("list of a set: exit %d: %s", code, out)
	}

	tests := []struct {
		name   string
		args   []string
		code   int
		errOut string
	}{
		{"no resource", []string{"-dsn", e.dsn, "fence"}, 2, "RESOURCE..."},
		{"no database", []string{"-dsn", "", "fence", "x"}, 2, "no database"},
		{"bad name with -release", []string{"-dsn", e.dsn, "fence", "-release", "a/b"}, 2, "slash"},
		{"empty resource", []string{"-dsn", e.dsn, "fence", ""}, 2, "empty"},
		{"unreachable etcd", []string{"-dsn", e.dsn, "-endpoints", "127.0.0.1:1", "-timeout", "1s", "fence", "x"}, 1, "cannot reach etcd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := fencectl(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.errOut) {
				t.Errorf("exit %d (want %d); stdout %q; stderr %q (want %q)", code, tc.code, out, errOut, tc.errOut)
			}
		})
	}
}

// TestRun_fence_servers: the same fence on PostgreSQL and MariaDB, with a live
// holder whose next write is refused.
func TestRun_fence_servers(t *testing.T) {
	srv := locktest.Start(t)
	for _, tc := range []struct {
		name string
		dsn  func(testing.TB) string
		open func(string) (*sql.DB, error)
		md   migrations.Dialect
		sd   migrations.Dialect
	}{
		{"postgres", postgres.DSN, func(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }, migrations.Postgres, migrations.Postgres},
		{"mariadb", mariadb.DSN, mysql.Open, migrations.MySQL, migrations.MySQL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			db, err := tc.open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := migrations.Up(t.Context(), db, tc.md); err != nil {
				t.Fatal(err)
			}
			e := newFenceEnv(t, srv, db, tc.sd, dsn)
			code, out, errOut := fencectl(t, "-dsn", dsn, "fence", "-release", "account-42")
			if code != 0 || !strings.Contains(out, "mark "+strconv.FormatInt(int64(e.holder.Token()), 10)+" -> ") || !strings.Contains(out, "released") {
				t.Fatalf("fence: exit %d: %s %s", code, out, errOut)
			}
			if err := e.write(t); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("the holder's write after the fence = %v, want ErrStale", err)
			}
		})
	}
}

func regexpMatch(s, re string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestRun_fence_all: fence -all raises every stored mark (a resource nobody holds
// too) and fences each held lock by name; naming a resource with -all is misuse.
func TestRun_fence_all(t *testing.T) {
	srv := locktest.Start(t)
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	e := newFenceEnv(t, srv, db, migrations.SQLite, "sqlite:"+path)
	old := fence.NewGrant("unheld", 1) // a grant from before, its lock long gone
	if err := fence.Exec(t.Context(), e.store, old, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := fencectl(t, "-dsn", e.dsn, "fence", "-all", "account-42"); code != 2 {
		t.Errorf("fence -all NAME: exit %d, want 2", code)
	}
	code, out, errOut := fencectl(t, "-dsn", e.dsn, "fence", "-all")
	if code != 0 || !strings.Contains(out, "raised 2 marks") || !strings.Contains(out, `fenced "account-42"`) {
		t.Fatalf("fence -all: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "must release and re-acquire") || !strings.Contains(out, "a new holder waits for it") {
		t.Errorf("fence -all does not say what the live holder must do:\n%s", out)
	}
	if err := e.write(t); !errors.Is(err, fence.ErrStale) {
		t.Errorf("the holder's write after fence -all = %v, want fence.ErrStale", err)
	}
	if err := fence.Exec(t.Context(), e.store, old, func(*sql.Tx) error { return nil }); !errors.Is(err, fence.ErrStale) {
		t.Errorf("the unheld resource's old grant after fence -all = %v, want fence.ErrStale", err)
	}
}

// TestRun_fence_unknown: a resource with neither a lock held nor a mark stored (a
// typo) is refused, naming -new, and nothing is raised; -new fences it.
func TestRun_fence_unknown(t *testing.T) {
	srv := locktest.Start(t)
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	e := newFenceEnv(t, srv, db, migrations.SQLite, "sqlite:"+path) // account-42: held, marked
	if _, err := e.locks.Acquire(t.Context(), "held-unmarked"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Exec(t.Context(), e.store, fence.NewGrant("marked-unheld", 1), func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	mark := func(r string) fence.Token {
		t.Helper()
		tok, err := fencemark.Read(t.Context(), db, migrations.SQLite, r)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tests := []struct {
		name    string
		args    []string
		code    int
		errOut  string   // on stderr
		raised  []string // marks above what they were
		kept    []string // marks unchanged
		missing []string // no mark stored after
	}{
		{"typo", []string{"acount-42"}, 1, "give -new", nil, nil, []string{"acount-42"}},
		{"typo among known: nothing raised", []string{"account-42", "acount-42"}, 1, "give -new", nil, []string{"account-42"}, []string{"acount-42"}},
		{"not a lock name, no mark", []string{"a/b"}, 1, "give -new", nil, nil, []string{"a/b"}},
		{"held, no mark", []string{"held-unmarked"}, 0, "", []string{"held-unmarked"}, nil, nil},
		{"marked, not held", []string{"marked-unheld"}, 0, "", []string{"marked-unheld"}, nil, nil},
		{"-new", []string{"-new", "acount-42", "a/b"}, 0, "", []string{"acount-42", "a/b"}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]fence.Token{}
			for _, r := range append(tc.raised, tc.kept...) {
				before[r] = mark(r)
			}
			code, out, errOut := fencectl(t, append([]string{"-dsn", e.dsn, "fence"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.errOut) {
				t.Fatalf("exit %d (want %d); stdout %q; stderr %q (want %q)", code, tc.code, out, errOut, tc.errOut)
			}
			for _, r := range tc.raised {
				if got := mark(r); got <= before[r] {
					t.Errorf("mark of %q = %d, not raised from %d", r, got, before[r])
				}
			}
			for _, r := range tc.kept {
				if got := mark(r); got != before[r] {
					t.Errorf("mark of %q = %d, want it left at %d", r, got, before[r])
				}
			}
			for _, r := range tc.missing {
				if got := mark(r); got != 0 {
					t.Errorf("mark of %q = %d, want none stored", r, got)
				}
			}
		})
	}
}
