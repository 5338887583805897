package pgxfence_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// TestStore_Fenced_commitCut cuts the TCP connection (no FATAL from the server, as
// when the server's machine or the network dies) while COMMIT is in flight: pgx
// reports the dead connection as "conn closed", an error it marks safe to retry,
// though COMMIT went out. Fenced must say the outcome is unknown.
func TestStore_Fenced_commitCut(t *testing.T) {
	direct := newPool(t)
	tbl := fmt.Sprintf("cut_commit_%d", time.Now().UnixNano())
	for _, q := range []string{
		"CREATE TABLE " + tbl + " (id int PRIMARY KEY)",
		"CREATE OR REPLACE FUNCTION fgt_cut_commit() RETURNS trigger LANGUAGE plpgsql AS " +
			"$$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON " + tbl +
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fgt_cut_commit()",
	} {
		if _, err := direct.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for i, mode := range []string{"pipelined", "fence-first"} {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			cfg := direct.Config().ConnConfig
			proxy, err := delayproxy.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), 0)
			if err != nil {
				t.Fatal(err)
			}
			since := time.Now()
			pcfg := direct.Config().Copy()
			pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.Port())
			pool, err := pgxpool.NewWithConfig(ctx, pcfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store := newStore(pool)
			if mode == "fence-first" {
				store = fenceFirstStore(t, pool)
			}
			cut := make(chan struct{})
			go func() {
				defer close(cut)
				waitCommitting(t, direct, since)
				_ = proxy.Close()
			}()
			err = fence.Exec(ctx, store, fence.NewGrant("cut-"+mode, 5), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO "+tbl+" VALUES ($1)", i)
				return err
			})
			<-cut
			wantUnknown(t, err)
			// The server, which never noticed the cut, commits once its trigger
			// ends: the outcome really was unknown.
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				n := mustInt(t, direct, "SELECT count(*) FROM "+tbl+" WHERE id = "+strconv.Itoa(i))
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the cut commit never landed")
				}
			}
		})
	}
}

// waitCommitting polls until a backend started after since runs COMMIT (sleeping in
// the deferred trigger).
func waitCommitting(t *testing.T, pool *pgxpool.Pool, since time.Time) {
	t.Helper()
	for t.Context().Err() == nil {
		var n int64
		err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "+
			"AND pid <> pg_backend_pid() AND state = 'active' AND query ILIKE 'commit%' AND wait_event = 'PgSleep' "+
			"AND backend_start >= $1", since).Scan(&n)
		if err != nil || n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
