package pgxfence_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

// A job holding the lock on account-42 (token 34) writes the account's invoice. If a
// newer holder has written meanwhile, the database refuses and the job stops.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var lock fence.Grant = fence.NewGrant("account-42", 34) // a *lockclient.Lock in a real job

	store, err := pgxfence.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	err = fence.Exec(ctx, store, lock, func(tx pgx.Tx) error {
		// The first statement travels with BEGIN and the fence raise, and never runs
		// if the raise is refused: it returns the *fence.StaleError instead. Act
		// outside the database only after it returned.
		_, err := tx.Exec(ctx, `UPDATE invoices SET total = $1 WHERE account = $2`, 200, 42)
		return err
	})
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		log.Printf("token %d is stale: %d already wrote; stopping", stale.Presented, stale.Seen)
	case err != nil:
		log.Fatal(err)
	}
}

// A token-column write: one statement, refused if the row carries a higher token.
// The table needs a fence_token column (migrations.GenerateTokenColumn writes the
// migration that adds it).
func ExampleStore_Update() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	lock := fence.NewGrant("account-42", 34)

	row := fence.Row{Table: "billing.invoices", Key: []fence.Col{fence.Col{Name: "account", Value: 42}}}
	store, err := pgxfence.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	err = store.Update(ctx, lock, row, fence.Col{Name: "total", Value: 200}, fence.Col{Name: "status", Value: "sent"})
	switch {
	case errors.Is(err, fence.ErrStale):
		log.Print("a newer holder wrote this invoice; stopping")
	case errors.Is(err, fence.ErrNotFound):
		log.Print("no invoice for account 42")
	case err != nil:
		log.Fatal(err)
	}
}

// Fenced transactions at SERIALIZABLE: a concurrent fence raise by a newer holder is
// a *fence.StaleError; a serialization failure while this grant is still current is
// fence.ErrBusy, and the whole transaction may be run again.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgxfence.New(pool, pgxfence.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable}))
	if err != nil {
		log.Fatal(err)
	}
	lock := fence.NewGrant("account-42", 34)
	for {
		err = fence.Exec(ctx, store, lock, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 50 WHERE id = $1`, 42)
			return err
		})
		if !errors.Is(err, fence.ErrBusy) {
			break
		}
	}
	if err != nil {
		log.Print(err)
	}
}

// The fence raised before the function runs: BEGIN and the raise take a round trip of
// their own, and the function is called only once the fence holds, for functions that
// act outside the database before their first statement.
func ExampleWithFenceFirst() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgxfence.New(pool, pgxfence.WithFenceFirst())
	if err != nil {
		log.Fatal(err)
	}
	lock := fence.NewGrant("invoice-42", 34)
	err = fence.Exec(ctx, store, lock, func(tx pgx.Tx) error {
		// Called only after the fence held: the fence row is locked to commit.
		_, err := tx.Exec(ctx, `UPDATE invoices SET total = $1 WHERE account = $2`, 120, 42)
		return err
	})
	if errors.Is(err, fence.ErrStale) {
		log.Print("a newer holder wrote: stop, do not retry")
	}
}
