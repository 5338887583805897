package pgxfence_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/fence"
)

// TestStore_Fenced_pipelinedTx checks that the pgx.Tx a pipelined Fenced hands fn
// behaves as a begun transaction does, whatever fn's first call is.
func TestStore_Fenced_pipelinedTx(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	s := pipelinedStore(t, pool)
	tests := []struct {
		name  string
		fn    func(t *testing.T, tx pgx.Tx) error
		total int64 // the invoice's total after Fenced
	}{
		{"rows then a write", func(t *testing.T, tx pgx.Tx) error {
			rows, _ := tx.Query(t.Context(), "SELECT g FROM generate_series(1, 3) AS g")
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil || len(got) != 3 || got[2] != 3 {
				t.Fatalf("rows = %v, %v; want [1 2 3]", got, err)
			}
			_, err = tx.Exec(t.Context(), "UPDATE invoices SET total = 6 WHERE account = 42")
			return err
		}, 6},
		{"rows read to the end without Close", func(t *testing.T, tx pgx.Tx) error {
			rows, err := tx.Query(t.Context(), "SELECT g FROM generate_series(1, 2) AS g")
			if err != nil {
				return err
			}
			var sum int64
			for rows.Next() {
				var g int64
				if err := rows.Scan(&g); err != nil {
					return err
				}
				sum += g
			}
			if rows.Err() != nil || rows.CommandTag().RowsAffected() != 2 {
				t.Fatalf("rows: err %v, tag %q", rows.Err(), rows.CommandTag())
			}
			_, err = tx.Exec(t.Context(), "UPDATE invoices SET total = $1 WHERE account = 42", sum)
			return err
		}, 3},
		{"no row", func(t *testing.T, tx pgx.Tx) error {
			var v int64
			if err := tx.QueryRow(t.Context(), "SELECT total FROM invoices WHERE account = -1").Scan(&v); !errors.Is(err, pgx.ErrNoRows) {
				t.Fatalf("Scan() = %v, want pgx.ErrNoRows", err)
			}
			_, err := tx.Exec(t.Context(), "UPDATE invoices SET total = 7 WHERE account = 42")
			return err
		}, 7},
		{"named arguments", func(t *testing.T, tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), "UPDATE invoices SET total = @total WHERE account = @account",
				pgx.NamedArgs{"total": 8, "account": 42})
			return err
		}, 8},
		{"query exec mode argument", func(t *testing.T, tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), "UPDATE invoices SET total = $1 WHERE account = 42", pgx.QueryExecModeSimpleProtocol, 9)
			return err
		}, 9},
		{"savepoint first", func(t *testing.T, tx pgx.Tx) error {
			sp, err := tx.Begin(t.Context())
			if err != nil {
				return err
			}
			if _, err := sp.Exec(t.Context(), "UPDATE invoices SET total = 10 WHERE account = 42"); err != nil {
				return err
			}
			return sp.Commit(t.Context())
		}, 10},
		{"batch first", func(t *testing.T, tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue("UPDATE invoices SET total = 11 WHERE account = 42")
			return tx.SendBatch(t.Context(), b).Close()
		}, 11},
		{"connection first", func(t *testing.T, tx pgx.Tx) error {
			// Conn begins the transaction: this write is inside it, fenced.
			_, err := tx.Conn().Exec(t.Context(), "UPDATE invoices SET total = 12 WHERE account = 42")
			return err
		}, 12},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, tok := "tx/"+tt.name, fence.Token(100+i)
			if err := s.Fenced(t.Context(), fence.NewGrant(res, tok), func(tx pgx.Tx) error { return tt.fn(t, tx) }); err != nil {
				t.Fatalf("Fenced() = %v", err)
			}
			if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != tt.total {
				t.Fatalf("total = %d, want %d", got, tt.total)
			}
			if got := stored(t, pool, res); got != tok {
				t.Fatalf("stored token = %d, want %d", got, tok)
			}
		})
	}
}

// TestStore_Fenced_pipelinedFirstStatementFails: a first statement that cannot be
// prepared or encoded fails as it would in a begun transaction, and nothing commits,
// not even the fence raise, whether fn returns the error or swallows it.
func TestStore_Fenced_pipelinedFirstStatementFails(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	s := pipelinedStore(t, pool)
	tests := []struct {
		name string
		run  func(tx pgx.Tx) error
		want func(error) bool
	}{
		{"syntax error", func(tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), "UPDATE invoices SET total = WHERE")
			return err
		}, func(err error) bool {
			var pgErr *pgconn.PgError
			return errors.As(err, &pgErr) && pgErr.Code == "42601"
		}},
		{"argument that cannot be encoded", func(tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), "UPDATE invoices SET total = $1 WHERE account = 42", make(chan int))
			return err
		}, func(err error) bool { return err != nil }},
		{"server error", func(tx pgx.Tx) error {
			var v int64
			return tx.QueryRow(t.Context(), "SELECT 1 / (total - total) FROM invoices WHERE account = 42").Scan(&v)
		}, func(err error) bool {
			var pgErr *pgconn.PgError
			return errors.As(err, &pgErr) && pgErr.Code == "22012"
		}},
	}
	for i, tt := range tests {
		for _, swallow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/swallowed=%v", tt.name, swallow), func(t *testing.T) {
				res := fmt.Sprintf("fails/%s/%v", tt.name, swallow)
				var fromStatement error
				err := s.Fenced(t.Context(), fence.NewGrant(res, fence.Token(1+i)), func(tx pgx.Tx) error {
					fromStatement = tt.run(tx)
					if swallow {
						_, _ = tx.Exec(t.Context(), "UPDATE invoices SET total = -1 WHERE account = 42")
						return nil
					}
					return fromStatement
				})
				if !tt.want(fromStatement) {
					t.Fatalf("statement error = %v", fromStatement)
				}
				switch {
				case !swallow && err != fromStatement:
					t.Fatalf("Fenced() = %v, want fn's error %v", err, fromStatement)
				case swallow && tt.name != "argument that cannot be encoded" && !errors.Is(err, pgx.ErrTxCommitRollback):
					// The failed statement aborted the transaction: the commit rolls back.
					t.Fatalf("Fenced() = %v, want pgx.ErrTxCommitRollback", err)
				}
				if swallow && err == nil {
					// A statement pgx never sent does not abort the transaction, as
					// unpipelined: fn's later write and the fence commit.
					if got := stored(t, pool, res); got != fence.Token(1+i) {
						t.Fatalf("stored token = %d, want %d", got, 1+i)
					}
					mustExec(t, pool, "UPDATE invoices SET total = 0 WHERE account = 42")
					return
				}
				if got := stored(t, pool, res); got != 0 {
					t.Fatalf("stored token = %d after a failed transaction, want none", got)
				}
				if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != 0 {
					t.Fatalf("total = %d, want 0", got)
				}
			})
		}
	}
}

// TestStore_Fenced_pipelinedSchemaMissing: without the migrations the first
// statement's batch fails with ErrSchema, and the connection is left idle.
func TestStore_Fenced_pipelinedSchemaMissing(t *testing.T) {
	conn, err := pgx.Connect(t.Context(), postgres.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	s := pipelinedStore(t, conn)
	for _, fn := range []func(pgx.Tx) error{
		func(pgx.Tx) error { return nil },
		func(tx pgx.Tx) error { _, err := tx.Exec(t.Context(), "SELECT 1"); return err },
	} {
		if err := s.Fenced(t.Context(), fence.NewGrant("r", 1), fn); !errors.Is(err, fence.ErrSchema) {
			t.Fatalf("Fenced() = %v, want ErrSchema", err)
		}
		if conn.PgConn().TxStatus() != 'I' {
			t.Fatal("connection left inside a transaction")
		}
	}
}
