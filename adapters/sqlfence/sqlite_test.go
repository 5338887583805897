package sqlfence_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// childEnv makes the test binary a writer process of TestSQLite_multiProcess
// instead of running tests: "path,index,processes".
const childEnv = "FENCEGATE_SQLFENCE_CHILD"

const (
	childRounds = 40
	mpResource  = "shared-ledger"
)

// sqliteChild is one writer process: fenced transactions with tokens that interleave
// with the other processes' (index + round*processes), so some are stale, plus
// token-column updates. It prints "ok <n> stale <m>" and exits 0, or prints the first
// unexpected error (a raw "database is locked" among them) and exits 1.
func sqliteChild() int {
	parts := strings.Split(os.Getenv(childEnv), ",")
	if len(parts) != 3 {
		fmt.Println("bad", childEnv)
		return 2
	}
	idx, _ := strconv.Atoi(parts[1])
	procs, _ := strconv.Atoi(parts[2])
	db, err := sqlite.Open(parts[0])
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer db.Close()
	ctx := context.Background()
	store := newStore(db, migrations.SQLite)
	// Start together: the parent creates the go file once every process runs.
	for {
		if _, err := os.Stat(parts[0] + ".go"); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ok, stale := 0, 0
	for round := range childRounds {
		tok := fence.Token(idx + 1 + round*procs)
		err := fence.Exec(ctx, store, fence.NewGrant(mpResource, tok), func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "UPDATE mp SET val = val + 1 WHERE id = 'counter'"); err != nil {
				return err
			}
			var pos int64
			if err := tx.QueryRowContext(ctx, "SELECT val FROM mp WHERE id = 'counter'").Scan(&pos); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO mp (id, val, fence_token) VALUES (?, ?, ?)",
				fmt.Sprintf("log-%d", tok), pos, int64(tok))
			return err
		})
		switch {
		case err == nil:
			ok++
		case errors.Is(err, fence.ErrStale):
			stale++
		default:
			fmt.Printf("process %d token %d: Exec: %v\n", idx, tok, err)
			return 1
		}
		err = store.Update(ctx, fence.NewGrant("row", tok), fence.Row{Table: "mp", Key: []fence.Col{{Name: "id", Value: "row"}}},
			fence.Col{Name: "val", Value: int64(tok)})
		if err != nil && !errors.Is(err, fence.ErrStale) {
			fmt.Printf("process %d token %d: Update: %v\n", idx, tok, err)
			return 1
		}
	}
	fmt.Printf("ok %d stale %d\n", ok, stale)
	return 0
}

// TestSQLite_multiProcess runs several processes writing one SQLite file at once:
// no raw "database is locked" may escape, every acknowledged fenced write is counted
// exactly once, and the committed tokens rise in commit order.
func TestSQLite_multiProcess(t *testing.T) {
	db, path := sqliteDB(t)
	mustExec(t, db, "CREATE TABLE mp (id TEXT PRIMARY KEY, val INTEGER NOT NULL DEFAULT 0, fence_token INTEGER NOT NULL DEFAULT 0)")
	mustExec(t, db, "INSERT INTO mp (id) VALUES ('counter'), ('row')")
	const procs = 3
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d", childEnv, path, i, procs))
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	if err := os.WriteFile(path+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	acked := 0
	for i, cmd := range cmds {
		err := cmd.Wait()
		out := strings.TrimSpace(outs[i].String())
		if err != nil {
			t.Errorf("process %d: %v: %s", i, err, out)
			continue
		}
		var ok, stale int
		if _, err := fmt.Sscanf(out, "ok %d stale %d", &ok, &stale); err != nil {
			t.Errorf("process %d printed %q", i, out)
		}
		acked += ok
		t.Logf("process %d: %d committed, %d refused as stale", i, ok, stale)
	}
	if t.Failed() {
		return
	}
	if got := queryInt(t, db, "SELECT val FROM mp WHERE id = 'counter'"); got != int64(acked) {
		t.Fatalf("counter = %d, want the %d acknowledged writes", got, acked)
	}
	if acked == 0 {
		t.Fatal("no process committed anything")
	}
	rows, err := db.QueryContext(t.Context(), "SELECT fence_token FROM mp WHERE id LIKE 'log-%' ORDER BY val")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last, n int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if tok <= last {
			t.Fatalf("token %d committed after token %d", tok, last)
		}
		last, n = tok, n+1
	}
	if n != int64(acked) {
		t.Fatalf("%d log rows, want %d", n, acked)
	}
	if got := queryInt(t, db, "SELECT token FROM fence_tokens WHERE resource = ?", mpResource); got != last {
		t.Fatalf("fence token = %d, want the last committed %d", got, last)
	}
	if got, want := queryInt(t, db, "SELECT fence_token FROM mp WHERE id = 'row'"), int64(procs*childRounds); got != want {
		t.Fatalf("row token = %d, want the highest presented %d", got, want)
	}
}

// holdWriteLock takes SQLite's write lock on path from a separate connection and
// keeps it until the returned function is called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := raw.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
			raw.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// TestSQLite_busy_outlastsContext: a write lock held past ctx's end ends the wait
// with ctx's error, and with fence.ErrBusy where the Store itself was retrying (a pool
// without busy timeout); never with the driver's raw "database is locked".
func TestSQLite_busy_outlastsContext(t *testing.T) {
	db, path := sqliteDB(t)
	mustExec(t, db, "CREATE TABLE mp (id TEXT PRIMARY KEY, fence_token INTEGER NOT NULL DEFAULT 0)")
	holdWriteLock(t, path)
	opened, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { opened.Close() })
	plain, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	tests := []struct {
		name string
		db   *sql.DB
		want []error
	}{
		{"sqlite.Open (driver waits)", opened, []error{context.DeadlineExceeded}},
		// fence.ErrBusy is added only when the Store saw SQLITE_BUSY before ctx ended; on a
		// loaded machine the deadline can pass first, so only ctx's error is required.
		{"no busy timeout (Store retries)", plain, []error{context.DeadlineExceeded}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(tt.db, migrations.SQLite)
			g := fence.NewGrant("busy", 1)
			calls := map[string]func(ctx context.Context) error{
				"Fenced": func(ctx context.Context) error {
					return store.Fenced(ctx, g, func(*sql.Tx) error { return errors.New("fn ran without the fence") })
				},
				"Upsert": func(ctx context.Context) error {
					return store.Upsert(ctx, g, fence.Row{Table: "mp", Key: []fence.Col{{Name: "id", Value: "x"}}})
				},
			}
			for name, call := range calls {
				ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
				err := call(ctx)
				cancel()
				for _, want := range tt.want {
					if !errors.Is(err, want) {
						t.Errorf("%s() under a held write lock = %v, want %v", name, err, want)
					}
				}
				if err != nil && strings.HasPrefix(err.Error(), "database is locked") {
					t.Errorf("%s() returned the driver's raw error %v", name, err)
				}
			}
		})
	}
}

// TestSQLite_busy_retriedWithoutTimeout: a pool opened without a busy timeout gets
// SQLITE_BUSY at once; the Store retries the begin until the lock is released.
func TestSQLite_busy_retriedWithoutTimeout(t *testing.T) {
	_, path := sqliteDB(t)
	plain, err := sql.Open("sqlite", path) // no busy_timeout, deferred BEGIN
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	release := holdWriteLock(t, path)
	store := newStore(plain, migrations.SQLite)
	done := make(chan error, 1)
	go func() {
		done <- store.Fenced(t.Context(), fence.NewGrant("retry", 7), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(t.Context(), "UPDATE fence_tokens SET updated_at = updated_at WHERE resource = 'retry'")
			return err
		})
	}()
	select {
	case err := <-done:
		t.Fatalf("Fenced() returned %v while another connection held the write lock", err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("Fenced() after the lock was released = %v", err)
	}
	if got := queryInt(t, plain, "SELECT token FROM fence_tokens WHERE resource = 'retry'"); got != 7 {
		t.Fatalf("fence token = %d, want 7", got)
	}
}
