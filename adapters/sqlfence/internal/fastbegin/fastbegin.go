// Package fastbegin is how sqlfence, which imports no driver, hands the one-statement
// fenced begin on MariaDB to sqlfence/mysql's connections, which send it.
package fastbegin

import (
	"context"
	"database/sql/driver"
)

// Begin is a fenced begin: Query (with Args) begins and raises the fence, Commit and
// Rollback end the transaction; Sent is set once Query is.
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
