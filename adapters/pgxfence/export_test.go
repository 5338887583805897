package pgxfence

import (
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/pgsql"
)

// QuoteTable is the table quoting every builder uses (internal/dialect, shared with
// sqlfence and the migrations generator), for the fuzz test.
func QuoteTable(name string) (string, error) { return dialect.QuoteTable(dialect.Postgres, name) }

// QuoteColumn is the column quoting every builder uses, for the fuzz test.
func QuoteColumn(name string) (string, error) {
	return dialect.CheckIdent(dialect.Postgres, "column", name)
}

// RaiseSQL is the fence raise Fenced sends, for the benchmark that compares it with
// the alternatives.
const RaiseSQL = pgsql.RaiseSQL

// MaxShapes is how many single-row statements a Store keeps.
const MaxShapes = dialect.MaxShapes

// UpdateSQL builds Update's statement: bump raises the fence row with a plain UPDATE,
// else with the upsert; for the benchmark that compares the two.
func UpdateSQL(r fence.Row, set []fence.Col, bump bool) (string, error) {
	return updateSQL(r, set, bump)
}
