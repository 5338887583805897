// Package fastbegin is the contract between sqlfence and sqlfence/mysql for the
// one-statement begin of a fenced transaction on MariaDB, so that sqlfence itself
// imports no driver. sqlfence decides the statements; a pool opened by sqlfence/mysql
// reports Driver and its connections send them.
package fastbegin

import (
	"context"
	"database/sql/driver"
)

// Begin is what a fenced begin asks of the connection: Query (with Args) starts the
// transaction and raises the fence in one statement, Commit and Rollback end it. The
// connection sets Sent once it sent Query.
type Begin struct {
	Query            string
	Args             []driver.NamedValue
	Commit, Rollback string
	Sent             bool
}

type key struct{}

// With returns ctx carrying b, for the BeginTx of a fenced transaction.
func With(ctx context.Context, b *Begin) context.Context { return context.WithValue(ctx, key{}, b) }

// From returns the Begin ctx carries, or nil.
func From(ctx context.Context) *Begin {
	b, _ := ctx.Value(key{}).(*Begin)
	return b
}

// Driver marks a pool whose connections honour a Begin carried by BeginTx's ctx.
type Driver struct{ driver.Driver }
