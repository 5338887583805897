package sqlfence_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

// TestStore_Fenced_compoundBegin walks MariaDB's one-statement fenced begin through
// each way the raise goes, on one connection whose session last handed a value back
// through LAST_INSERT_ID (a Decrement): a new resource's row inserted, an existing one
// raised, the same token again, and a lower one refused naming the stored token.
func TestStore_Fenced_compoundBegin(t *testing.T) {
	ctx := t.Context()
	db, _ := mysqlDB(t)
	db.SetMaxOpenConns(1)
	mustExec(t, db, "CREATE TABLE cb (id INT PRIMARY KEY, n INT NOT NULL)")
	mustExec(t, db, "INSERT INTO cb VALUES (1, 100)")
	s := newStore(db, migrations.MySQL)
	counter := nolock.Counter{Table: "cb", Key: []fence.Col{{Name: "id", Value: 1}}, Column: "n"}
	write := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE cb SET n = n + 1 WHERE id = 1")
		return err
	}
	steps := []struct {
		name string
		res  string
		tok  fence.Token
		seen fence.Token // > 0: refused, this token stored
	}{
		{"new resource", "cb-a", 5, 0},
		{"raised", "cb-a", 7, 0},
		{"same token", "cb-a", 7, 0},
		{"lower token", "cb-a", 6, 7},
		{"another new resource", "cb-b", 2, 0},
	}
	for _, st := range steps {
		if _, err := s.Decrement(ctx, counter, 3); err != nil { // LAST_INSERT_ID(n - 3): not 0
			t.Fatal(err)
		}
		before := queryInt(t, db, "SELECT n FROM cb WHERE id = 1")
		err := fence.Exec(ctx, s, fence.NewGrant(st.res, st.tok), write)
		var se *fence.StaleError
		switch {
		case st.seen == 0 && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.seen > 0 && (!errors.As(err, &se) || se.Seen != st.seen):
			t.Fatalf("%s: err = %v, want a *fence.StaleError seeing %d", st.name, err, st.seen)
		}
		want := before + 1
		if st.seen > 0 {
			want = before
		}
		if got := queryInt(t, db, "SELECT n FROM cb WHERE id = 1"); got != want {
			t.Fatalf("%s: n = %d, want %d", st.name, got, want)
		}
	}
	if got := queryInt(t, db, "SELECT token FROM fence_tokens WHERE resource = 'cb-a'"); got != 7 {
		t.Fatalf("cb-a's mark = %d, want 7", got)
	}
}
