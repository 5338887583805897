package sqlfence_test

import (
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// watchedGrant is a fence.Watched grant whose Done channel the test closes.
type watchedGrant struct {
	fence.Grant
	done chan struct{}
}

func (g watchedGrant) Done() <-chan struct{} { return g.done }

// losingKey is a key value that closes the grant's Done channel when the driver reads
// it: the lock is lost while the write's transaction is open, after its raise.
type losingKey struct {
	id   int64
	done chan struct{}
}

func (k losingKey) Value() (driver.Value, error) {
	select {
	case <-k.done:
	default:
		close(k.done)
	}
	return k.id, nil
}

// TestStore_singleRowTx_lostBeforeCommit: SQLite's Update, Upsert and Delete run in a
// transaction (BEGIN IMMEDIATE, raise, write, COMMIT); a grant lost while it is open
// is checked before COMMIT, so the write rolls back with fence.ErrLost and neither
// the row nor the fence row changes.
func TestStore_singleRowTx_lostBeforeCommit(t *testing.T) {
	db, _ := sqliteDB(t)
	s := newStore(db, migrations.SQLite)
	mustExec(t, db, "CREATE TABLE lost (id INTEGER PRIMARY KEY, val INTEGER NOT NULL, fence_token INTEGER NOT NULL DEFAULT 0)")
	mustExec(t, db, "INSERT INTO lost (id, val, fence_token) VALUES (1, 0, 0)")
	if err := s.Update(t.Context(), fence.NewGrant("lost", 1), fence.Row{Table: "lost", Key: []fence.Col{{Name: "id", Value: 1}}}, fence.Col{Name: "val", Value: 1}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		write func(g fence.Grant, key fence.Col) error
	}{
		{"update", func(g fence.Grant, key fence.Col) error {
			return s.Update(t.Context(), g, fence.Row{Table: "lost", Key: []fence.Col{key}}, fence.Col{Name: "val", Value: 2})
		}},
		{"upsert", func(g fence.Grant, key fence.Col) error {
			return s.Upsert(t.Context(), g, fence.Row{Table: "lost", Key: []fence.Col{key}}, fence.Col{Name: "val", Value: 2})
		}},
		{"delete", func(g fence.Grant, key fence.Col) error {
			return s.Delete(t.Context(), g, fence.Row{Table: "lost", Key: []fence.Col{key}})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			err := tt.write(watchedGrant{fence.NewGrant("lost", 2), done}, fence.Col{Name: "id", Value: losingKey{1, done}})
			if !errors.Is(err, fence.ErrLost) {
				t.Fatalf("%s = %v, want fence.ErrLost", tt.name, err)
			}
			if got := queryInt(t, db, "SELECT val FROM lost WHERE id = 1"); got != 1 {
				t.Fatalf("val = %d, want 1 (unchanged)", got)
			}
			if got := queryInt(t, db, "SELECT token FROM fence_tokens WHERE resource = 'lost'"); got != 1 {
				t.Fatalf("stored token = %d, want 1 (unchanged)", got)
			}
		})
	}
}
