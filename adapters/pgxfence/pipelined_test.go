package pgxfence_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

func pipelinedStore(t testing.TB, db pgxfence.DB, opts ...pgxfence.Option) *pgxfence.Store {
	t.Helper()
	s, err := pgxfence.New(db, opts...) // pipelined is the default
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// firstStatements are the ways fn's first statement can reach the database. Each
// writes the invoice and draws from the sequence probe, whose nextval is not undone by
// a rollback: a probe still unused proves that the statement never ran.
var firstStatements = []struct {
	name string
	run  func(ctx context.Context, tx pgx.Tx, total int64) error
}{
	{"Exec", func(ctx context.Context, tx pgx.Tx, total int64) error {
		_, err := tx.Exec(ctx, "UPDATE invoices SET total = $1, written_by = nextval('probe') WHERE account = 42", total)
		return err
	}},
	{"Query", func(ctx context.Context, tx pgx.Tx, total int64) error {
		rows, err := tx.Query(ctx, "UPDATE invoices SET total = $1, written_by = nextval('probe') WHERE account = 42 RETURNING total", total)
		if err != nil {
			if rows == nil || !errors.Is(rows.Err(), err) {
				return errors.New("Query's error is not the rows' Err")
			}
			return err
		}
		defer rows.Close()
		for rows.Next() {
		}
		return rows.Err()
	}},
	{"QueryRow", func(ctx context.Context, tx pgx.Tx, total int64) error {
		var got int64
		return tx.QueryRow(ctx, "UPDATE invoices SET total = $1, written_by = nextval('probe') WHERE account = 42 RETURNING total", total).Scan(&got)
	}},
}

// TestStore_Fenced_pipelinedStaleFirstStatement sends a stale transaction's first
// statement in the same round trip as the refused fence raise, in every query
// execution mode pgx has: the statement never runs, fn gets the *fence.StaleError
// from the statement itself, and nothing is written.
func TestStore_Fenced_pipelinedStaleFirstStatement(t *testing.T) {
	base := newPool(t)
	invoicesTable(t, base)
	mustExec(t, base, "CREATE SEQUENCE probe")
	modes := []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	}
	for _, mode := range modes {
		cfg := base.Config()
		cfg.ConnConfig.DefaultQueryExecMode = mode
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s := pipelinedStore(t, pool)
		for _, st := range firstStatements {
			t.Run(mode.String()+"/"+st.name, func(t *testing.T) {
				ctx := t.Context()
				res := "stale/" + mode.String() + "/" + st.name
				if err := invoice(s, res, 34, 340); err != nil {
					t.Fatalf("token 34: %v", err)
				}
				mustExec(t, pool, "SELECT setval('probe', 1, false)") // unused again
				var fromStatement error
				err := s.Fenced(ctx, fence.NewGrant(res, 33), func(tx pgx.Tx) error {
					fromStatement = st.run(ctx, tx, 999)
					return fromStatement
				})
				wantStale(t, fromStatement, 33, 34)
				wantStale(t, err, 33, 34)
				if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != 340 {
					t.Fatalf("total = %d after the stale write, want 340", got)
				}
				if mustInt(t, pool, "SELECT count(*) FROM probe WHERE is_called") != 0 {
					t.Fatal("the stale first statement ran (it drew from the probe sequence)")
				}
				if got := stored(t, pool, res); got != 34 {
					t.Fatalf("stored token = %d, want 34", got)
				}
			})
		}
	}
}

// TestStore_Fenced_pipelinedSwallowedRefusal: fn ignores the refusal of its first
// statement, tries more statements and returns nil. Fenced still rolls back and
// returns the *fence.StaleError; nothing is written.
func TestStore_Fenced_pipelinedSwallowedRefusal(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	s := pipelinedStore(t, pool)
	ctx := t.Context()
	if err := invoice(s, "r", 10, 100); err != nil {
		t.Fatal(err)
	}
	var later []error
	err := s.Fenced(ctx, fence.NewGrant("r", 9), func(tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, "UPDATE invoices SET total = 9 WHERE account = 42")
		_, err := tx.Exec(ctx, "INSERT INTO invoices (account, total) VALUES (9, 9)")
		later = append(later, err)
		var n int64
		later = append(later, tx.QueryRow(ctx, "SELECT count(*) FROM invoices").Scan(&n))
		_, err = tx.Query(ctx, "SELECT 1")
		later = append(later, err)
		later = append(later, tx.SendBatch(ctx, &pgx.Batch{}).Close())
		later = append(later, tx.Commit(ctx))
		// Even straight through the connection nothing runs: it is still in the
		// transaction the refusal aborted.
		if _, err := tx.Conn().Exec(ctx, "UPDATE invoices SET total = 9 WHERE account = 42"); err == nil {
			t.Error("a write through tx.Conn() after the refusal succeeded")
		}
		return nil
	})
	wantStale(t, err, 9, 10)
	for _, err := range later {
		wantStale(t, err, 9, 10)
	}
	if got := mustInt(t, pool, "SELECT count(*) FROM invoices"); got != 1 {
		t.Fatalf("%d invoices, want 1: a statement after the refusal was written", got)
	}
	if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != 100 {
		t.Fatalf("total = %d, want 100", got)
	}
	if got := stored(t, pool, "r"); got != 10 {
		t.Fatalf("stored token = %d, want 10", got)
	}
}

// TestStore_Fenced_pipelinedNoStatements: a fenced transaction whose fn sends nothing
// still raises the stored token, and is still refused when stale.
func TestStore_Fenced_pipelinedNoStatements(t *testing.T) {
	pool := newPool(t)
	s := pipelinedStore(t, pool)
	ctx := t.Context()
	nothing := func(pgx.Tx) error { return nil }
	if err := s.Fenced(ctx, fence.NewGrant("r", 7), nothing); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, pool, "r"); got != 7 {
		t.Fatalf("stored token = %d after an empty fenced transaction, want 7", got)
	}
	wantStale(t, s.Fenced(ctx, fence.NewGrant("r", 6), nothing), 6, 7)
	if got := stored(t, pool, "r"); got != 7 {
		t.Fatalf("stored token = %d, want 7", got)
	}
}

// TestStore_Fenced_pipelinedVariants runs the timeline (33, 34, then 33 late) through
// each DB that can begin a transaction, and through a caller's pgx.Tx with
// WithFenceFirst (accepted: savepoints raise the fence first anyway).
func TestStore_Fenced_pipelinedVariants(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	ctx := t.Context()
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for name, db := range map[string]pgxfence.DB{"pool": pool, "pgxpool.Conn": pc, "pgx.Conn": conn} {
		t.Run(name, func(t *testing.T) {
			s := pipelinedStore(t, db)
			res := "timeline/" + name
			if err := invoice(s, res, 33, 100); err != nil {
				t.Fatalf("token 33: %v", err)
			}
			if err := invoice(s, res, 34, 200); err != nil {
				t.Fatalf("token 34: %v", err)
			}
			wantStale(t, invoice(s, res, 33, 999), 33, 34)
			if got := mustInt(t, db, "SELECT total FROM invoices WHERE account = 42"); got != 200 {
				t.Fatalf("total = %d, want 200", got)
			}
			if got := stored(t, pool, res); got != 34 {
				t.Fatalf("stored token = %d, want 34", got)
			}
		})
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Inside a caller's transaction the fence is a savepoint raised before fn: the
	// option asks for what is done anyway.
	s, err := pgxfence.New(tx, pgxfence.WithFenceFirst())
	if err != nil {
		t.Fatalf("New(tx, WithFenceFirst()) = %v", err)
	}
	if err := invoice(s, "timeline/tx", 35, 300); err != nil {
		t.Fatalf("token 35 in a caller's tx: %v", err)
	}
	wantStale(t, invoice(s, "timeline/tx", 34, 999), 34, 35)
	if got := mustInt(t, tx, "SELECT total FROM invoices WHERE account = 42"); got != 300 {
		t.Fatalf("total in the caller's tx = %d after the refused savepoint, want 300", got)
	}
}

// TestStore_Fenced_pipelinedBlockedStale: once a newer transaction's first statement
// has run, its fence row stays locked to commit, and a stale transaction arriving
// meanwhile waits on it and is then refused.
func TestStore_Fenced_pipelinedBlockedStale(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	s := pipelinedStore(t, pool)
	ctx := context.Background()
	if err := invoice(s, "r", 1, 1); err != nil {
		t.Fatal(err)
	}
	inside, finish := make(chan struct{}), make(chan struct{})
	newer := make(chan error, 1)
	go func() {
		newer <- s.Fenced(ctx, fence.NewGrant("r", 41), func(tx pgx.Tx) error {
			var total int64
			if err := tx.QueryRow(ctx, "SELECT total FROM invoices WHERE account = 42").Scan(&total); err != nil {
				return err
			}
			close(inside)
			<-finish
			_, err := tx.Exec(ctx, "UPDATE invoices SET total = $1, written_by = 41 WHERE account = 42", total+41)
			return err
		})
	}()
	<-inside
	stale := make(chan error, 1)
	go func() { stale <- invoice(s, "r", 40, 40) }()
	waitForLockWaiters(t, pool, 1)
	select {
	case err := <-stale:
		t.Fatalf("stale transaction returned %v while the newer one held the fence row", err)
	default:
	}
	close(finish)
	if err := <-newer; err != nil {
		t.Fatalf("newer transaction: %v", err)
	}
	wantStale(t, <-stale, 40, 41)
	if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != 42 {
		t.Fatalf("total = %d, want 42 (1 + 41)", got)
	}
	if got := stored(t, pool, "r"); got != 41 {
		t.Fatalf("stored token = %d, want 41", got)
	}
}

// TestStore_Fenced_sameTokenHoldsFence: a second transaction of the same grant finds
// its token already stored and does not rewrite the fence row, but still locks it to
// commit: a newer grant arriving meanwhile waits, and its write lands after.
func TestStore_Fenced_sameTokenHoldsFence(t *testing.T) {
	forEachMode(t, func(t *testing.T, store func(pgxfence.DB) *pgxfence.Store) {
		pool := newPool(t)
		invoicesTable(t, pool)
		s := store(pool)
		ctx := context.Background()
		if err := invoice(s, "held", 41, 1); err != nil {
			t.Fatal(err)
		}
		inside, finish := make(chan struct{}), make(chan struct{})
		again := make(chan error, 1)
		go func() {
			again <- s.Fenced(ctx, fence.NewGrant("held", 41), func(tx pgx.Tx) error {
				var total int64
				err := tx.QueryRow(ctx, "SELECT total FROM invoices WHERE account = 42").Scan(&total)
				close(inside)
				if err != nil {
					return err
				}
				<-finish
				_, err = tx.Exec(ctx, "UPDATE invoices SET total = $1, written_by = 41 WHERE account = 42", total+41)
				return err
			})
		}()
		<-inside
		newer := make(chan error, 1)
		go func() { newer <- invoice(s, "held", 42, 100) }()
		waitForLockWaiters(t, pool, 1)
		select {
		case err := <-newer:
			t.Fatalf("token 42 returned %v while token 41 held the fence row", err)
		default:
		}
		close(finish)
		if err := <-again; err != nil {
			t.Fatalf("token 41 again: %v", err)
		}
		if err := <-newer; err != nil {
			t.Fatalf("token 42: %v", err)
		}
		if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != 100 {
			t.Fatalf("total = %d, want 100 (token 42 wrote last)", got)
		}
		if got := stored(t, pool, "held"); got != 42 {
			t.Fatalf("stored token = %d, want 42", got)
		}
	})
}

// TestStore_Fenced_pipelinedRace: 40 writers with shuffled tokens each increment a
// counter and log the count they saw, under pipelined fences. Every acknowledged
// write is counted, refusals leave nothing, and tokens rise in commit order.
func TestStore_Fenced_pipelinedRace(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE counter (id INT PRIMARY KEY, n BIGINT NOT NULL)")
	mustExec(t, pool, "INSERT INTO counter VALUES (1, 0)")
	mustExec(t, pool, "CREATE TABLE commits (pos BIGINT PRIMARY KEY, token BIGINT NOT NULL)")
	s := pipelinedStore(t, pool)
	ctx := context.Background()
	const n = 40
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok      = map[int64]bool{}
		refused int
		release = make(chan struct{})
	)
	for _, p := range rand.Perm(n) {
		tok := int64(p + 1)
		wg.Go(func() {
			<-release
			err := s.Fenced(ctx, fence.NewGrant("hot", fence.Token(tok)), func(tx pgx.Tx) error {
				var pos int64
				if err := tx.QueryRow(ctx, "UPDATE counter SET n = n + 1 WHERE id = 1 RETURNING n").Scan(&pos); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO commits VALUES ($1, $2)", pos, tok)
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok[tok] = true
			case errors.Is(err, fence.ErrStale):
				refused++
			default:
				t.Errorf("token %d: %v", tok, err)
			}
		})
	}
	close(release)
	wg.Wait()
	if got := mustInt(t, pool, "SELECT n FROM counter"); got != int64(len(ok)) {
		t.Fatalf("counter = %d, want %d acknowledged writes (%d refused)", got, len(ok), refused)
	}
	rows, err := pool.Query(ctx, "SELECT token FROM commits ORDER BY pos")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != len(ok) {
		t.Fatalf("%d commits logged, want %d", len(tokens), len(ok))
	}
	for i, tok := range tokens {
		if !ok[tok] || (i > 0 && tok <= tokens[i-1]) {
			t.Fatalf("commit order %v: token %d unacknowledged or not rising", tokens, tok)
		}
	}
	if got := stored(t, pool, "hot"); int64(got) != tokens[len(tokens)-1] {
		t.Fatalf("stored token = %d, want the last committed %d", got, tokens[len(tokens)-1])
	}
}
